"""The compile nets under torch's C++ extension builder, on real g++ builds (tests/fixtures/programs/cpp_builds.py)
beside a watched family served cleanly: every way a build reaches the compiler after serving start is MLA007 or makes
the run incomplete, never a pass; a build that built nothing (torch found the extension current) is a load, not a
compile; and one build is one compile, however many netted functions it goes through."""

import shutil
import sys

import pytest

from mlacheck.rulefiles import BUNDLED
from tests.integration.cli import ROOT, run_cli

PROGRAM = str(ROOT / "tests" / "fixtures" / "programs" / "cpp_builds.py")

pytestmark = pytest.mark.skipif(shutil.which("g++") is None or shutil.which("ninja") is None, reason="no g++/ninja")


def run(tmp_path, mode):
    rules = tmp_path / "rules"
    rules.mkdir()
    shutil.copy(BUNDLED / "jit_compile_nets.toml", rules)
    shutil.copy(ROOT / "tests" / "fixtures" / "synthetic.toml", rules)
    folder = tmp_path / "program"
    folder.mkdir()
    result = run_cli(
        "run", "--dry", "--rules", str(rules), "--run-dir", str(tmp_path / "run"), "--", sys.executable, PROGRAM,
        mode, str(folder), tmp_path=tmp_path, env_extra={"PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert f"cpp builds done {mode}" in result.stdout, result.stdout + result.stderr
    assert result.report["internal_errors"] == [], result.report["internal_errors"]
    return result


def builds(result):
    return [(c["kernel"], c["phase"]) for c in result.report["unwatched_compiles"]]


def mla007(result):
    return [f for f in result.report["findings"] if f["code"] == "MLA007"]


def test_a_build_after_serving_start_is_mla007_and_counted_once(tmp_path):
    """load() runs _jit_compile, _write_ninja_file_and_build_library and _run_ninja_build, all netted: one build."""
    result = run(tmp_path, "load")
    assert result.code == 1, result.stdout
    [finding] = mla007(result)
    assert finding["family"] == "unwatched:ext_b" and "torch cpp_extension" in finding["message"]
    assert builds(result) == [("ext_a", "warmup"), ("ext_b", "serving")]


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """One run: ext_a asked for again as the warm-up built it, then again from other sources; ext_b built below
    load() (_write_ninja_file_and_build_library); ext_bad's build fails in g++ and the program goes on."""
    return run(tmp_path_factory.mktemp("served"), "same,other_sources,ninja_direct,failed")


def test_the_same_extension_asked_for_again_built_nothing_and_is_no_compile(served):
    """torch's versioner found ext_a unchanged and ran no build: the warm-up's build covered it (false finding before)."""
    assert builds(served)[0] == ("ext_a", "warmup")
    [again] = [f for f in mla007(served) if f["family"] == "unwatched:ext_a"]  # (other_sources' alone)
    assert set(again["diff"]) == {"sources"}, again  # (the same name, build folder and flags)


def test_the_same_name_from_other_sources_is_a_rebuild_named_by_its_sources(served):
    [again] = [f for f in mla007(served) if f["family"] == "unwatched:ext_a"]
    old, new = again["diff"]["sources"]
    assert old != new and "1 file" in new, again["diff"]
    assert builds(served).count(("ext_a", "serving")) == 1


def test_a_build_below_load_is_netted(served):
    """_write_ninja_file_and_build_library called itself (it passed before)."""
    [finding] = [f for f in mla007(served) if f["family"] == "unwatched:ext_b"]
    assert "torch cpp_extension" in finding["message"]


def test_a_serving_path_build_that_failed_is_mla007_with_its_time(served):
    """The request waited for g++ all the same; the program caught the error (it passed before)."""
    assert "build failed, the program goes on: RuntimeError" in served.stdout
    [finding] = [f for f in mla007(served) if f["family"] == "unwatched:ext_bad"]
    assert "raised RuntimeError" in finding["message"] and " s stall" in finding["message"], finding["message"]
    [listed] = [c for c in served.report["unwatched_compiles"] if c["kernel"] == "ext_bad"]
    assert listed["raised"] == "RuntimeError" and listed["seconds"] > 0


def test_a_reloaded_builder_is_netted_again(tmp_path):
    """importlib.reload(torch.utils.cpp_extension) made new functions; its load() built ext_b (it passed before)."""
    result = run(tmp_path, "reload")
    assert result.code == 1, result.stdout
    [finding] = mla007(result)
    assert finding["family"] == "unwatched:ext_b"


def test_a_builder_rebound_past_the_net_makes_the_run_incomplete(tmp_path):
    result = run(tmp_path, "rebind")
    assert result.code == 2 and result.report["verdict"] == "incomplete", result.stdout
    [reason] = result.report["incomplete"]
    assert reason.startswith("torch cpp_extension: torch.utils.cpp_extension._jit_compile no longer holds"), reason


def test_a_vendored_copy_of_the_builder_is_netted_and_one_imported_late_is_named(tmp_path):
    """A library's own copy of cpp_extension.py (AITER ships one), found by the functions it defines: one imported
    before serving start is netted; one imported after it is named, the run incomplete (both passed before)."""
    result = run(tmp_path, "vendored,vendored_late")
    assert result.code == 1 and result.report["verdict"] == "fail", result.stdout
    finding, late_build = mla007(result)  # (the late copy's build: its ninja process, outside every net)
    assert finding["family"] == "unwatched:ext_b" and "copied as vendored_cpp_extension" in finding["message"]
    assert late_build["family"] == "unwatched:ninja" and late_build["key"]["command"].startswith("ninja"), late_build
    assert finding["site"].endswith("cpp_builds.py:48"), finding["site"]  # the program's call, not the copy's frames
    [late] = result.report["incomplete"]
    assert late.startswith("torch cpp_extension: late_cpp_extension is a copy of torch.utils.cpp_extension"), late


def test_a_copy_run_by_path_builds_through_a_compiler_process_that_is_mla007(tmp_path):
    """runpy.run_path of a copy (a plugin loader's namespace, no module): no net is on it, but the ninja it starts on
    the serving path is an unwatched compile, with its seconds from the reap (it passed before: red-team 14 #8)."""
    result = run(tmp_path, "run_path")
    assert result.code == 1 and result.report["verdict"] == "fail", result.stdout
    [finding] = mla007(result)
    assert finding["family"] == "unwatched:ninja" and "build process" in finding["message"], finding
    assert " s stall" in finding["message"] and finding["key"]["command"].startswith("ninja"), finding
    assert builds(result) == [("ext_a", "warmup"), ("ninja", "serving")]  # (g++ under ninja: not Python's child)


def test_a_fork_that_renamed_one_function_is_still_a_copy(tmp_path):
    """A copy that renamed _run_ninja_build still defines _jit_compile: netted, one build one compile (it passed
    before: red-team 14 #8)."""
    result = run(tmp_path, "renamed")
    assert result.code == 1 and result.report["verdict"] == "fail", result.stdout
    [finding] = mla007(result)
    assert finding["family"] == "unwatched:ext_b" and "copied as renamed_cpp_extension" in finding["message"]
    assert builds(result) == [("ext_a", "warmup"), ("ext_b", "serving")]  # (its ninja is its net's)


def test_a_compiler_process_in_the_warm_up_is_named_and_does_not_fail(tmp_path):
    result = run(tmp_path, "gxx_warmup")
    assert result.code == 0 and result.report["verdict"] == "pass", result.stdout
    assert builds(result) == [("ext_a", "warmup"), ("g++", "warmup")]
    [gxx] = [c for c in result.report["unwatched_compiles"] if c["kernel"] == "g++"]
    assert gxx["net"] == "C/C++ compiler" and gxx["seconds"] > 0, gxx


def test_a_compiler_under_a_targets_name_is_mla007(tmp_path):
    """x86_64-linux-gnu-g++ (Debian's and conda's name for a target's g++) on the serving path (it passed before:
    red-team 15 #1)."""
    result = run(tmp_path, "triplet")
    assert result.code == 1 and result.report["verdict"] == "fail", result.stdout
    [finding] = mla007(result)
    assert finding["family"] == "unwatched:x86_64-linux-gnu-g++" and "C/C++ compiler" in finding["message"], finding


def test_a_compile_through_os_system_is_mla007(tmp_path):
    """os.system's shell (C's system(): no spawn function sees it) runs g++ -c: its command line is read (it passed
    before: red-team 15 #1), and the finding names the compiler the line runs, not the shell (it read unwatched:sh)."""
    result = run(tmp_path, "system")
    assert result.code == 1 and result.report["verdict"] == "fail", result.stdout
    [finding] = mla007(result)
    assert finding["family"] == "unwatched:g++" and "C/C++ compiler" in finding["message"], finding
    assert finding["key"]["command"].startswith("sh -c g++ -c"), finding


@pytest.mark.parametrize("mode", ["find_library", "print_file"])
def test_a_compiler_that_only_asks_after_serving_start_passes(tmp_path, mode):
    """ctypes.util.find_library runs gcc and ld to find a library, and gcc -print-file-name= asks: neither compiles
    (both were a false MLA007: red-team 15 #2)."""
    result = run(tmp_path, mode)
    assert result.code == 0 and result.report["verdict"] == "pass", result.stdout
    assert builds(result) == [("ext_a", "warmup")]
