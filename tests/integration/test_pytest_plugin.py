"""The pytest plugin: `pytest --mlacheck` sessions run in subprocesses (the agent hooks module imports)."""

import json
import os
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

ROOT = Path(__file__).resolve().parents[2]
RULES = str(ROOT / "tests" / "fixtures" / "synthetic.toml")
OBSERVE = ("--mlacheck", f"--mlacheck-rules={RULES}")  # with "=": pytest finds its rootdir before it knows the option

HEADER = "from tests.fixtures import synthetic_kernels as k\n\n"
SERVING_COMPILE = (
    HEADER
    + """
def test_dispatch_misses_the_warmup():
    k.warmup(dtypes=("fp8",), causal=(True,))
    assert k.dispatch(1, "fp8", False) == 2   # the test itself passes
"""
)
CORRECT_WARMUP = (
    HEADER
    + """
def test_dispatch_hits_the_warmup():
    k.warmup(dtypes=("fp8",), causal=(True, False))
    assert k.dispatch(1, "fp8", True) == 2 and k.dispatch(1, "fp8", False) == 2
"""
)
DEAD_WARMUP = (
    HEADER
    + """
def test_one_variant_is_never_dispatched():
    k.warmup(dtypes=("fp8",), causal=(True, False))
    assert k.dispatch(1, "fp8", True) == 2
"""
)


@pytest.fixture
def inner(pytester, monkeypatch):
    """pytester with tests.fixtures importable, and no observation inherited from whoever runs this suite."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    for name in ("MLACHECK_RUN_DIR", "MLACHECK_RULES", "MLACHECK_COMPILE", "PYTEST_DISABLE_PLUGIN_AUTOLOAD"):
        monkeypatch.delenv(name, raising=False)
    return pytester


def run(pytester, *args):
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", *args, timeout=300)
    result.text = "\n".join(result.outlines + result.errlines)
    return result


def section(result):
    """The lines of the "mlacheck" summary section, or None without one."""
    starts = [i for i, line in enumerate(result.outlines) if line.startswith("=") and " mlacheck " in line]
    if not starts:
        return None
    lines = result.outlines[starts[0] + 1 :]
    end = next((i for i, line in enumerate(lines) if line.startswith("=")), len(lines))
    return lines[:end] + lines[end : end + 1]


def line_starting(lines, prefix):
    found = [line for line in lines if line.startswith(prefix)]
    assert len(found) == 1, (prefix, lines)
    return found[0]


def test_serving_path_compile_fails_a_session_whose_tests_pass(inner):
    inner.makepyfile(test_serving=SERVING_COMPILE)
    result = run(inner, *OBSERVE, "--mlacheck-run-dir", "run")
    result.assert_outcomes(passed=1)
    assert result.ret == pytest.ExitCode.TESTS_FAILED, result.text
    lines = section(result)
    assert lines is not None, result.text
    finding = line_starting(lines, "MLA001 ")
    assert "serving-path-compile [error] synthetic (causal=False): " in finding
    assert line_starting(lines, "verdict: ").startswith("verdict: FAIL  1 error(s), 1 warning(s)")
    assert line_starting(lines, "run folder: ") == f"run folder: {inner.path / 'run'}"
    meta = json.loads((inner.path / "run" / "meta.json").read_text())
    assert meta["command"][0] == "pytest" and "--mlacheck" in meta["command"]
    assert meta["exit_code"] == 0  # the tests' own status; mlacheck turned it into a failure
    assert len(list((inner.path / "run").glob("trace-*.jsonl"))) == 1


def test_correct_warmup_passes(inner):
    inner.makepyfile(test_serving=CORRECT_WARMUP)
    result = run(inner, *OBSERVE, "--mlacheck-run-dir", "run")
    assert result.ret == pytest.ExitCode.OK, result.text
    lines = section(result)
    assert lines is not None, result.text
    verdict = line_starting(lines, "verdict: ")
    assert verdict.startswith("verdict: PASS  0 error(s), 0 warning(s)") and "2 precompiled, 2 dispatch(es)" in verdict
    assert not [line for line in lines if line.startswith("MLA")]


def test_without_the_option_nothing_is_recorded_or_printed(inner):
    inner.makepyfile(test_serving=SERVING_COMPILE)
    result = run(inner)
    assert result.ret == pytest.ExitCode.OK, result.text
    assert section(result) is None and "MLA001" not in result.text
    assert not (inner.path / "mlacheck-runs").exists()


def test_plugin_is_loaded_and_cheap_without_the_option(inner):
    inner.makepyfile(
        test_imports="""
import sys

def test_only_the_plugin_module_is_imported():
    assert "mlacheck.pytest_plugin" in sys.modules
    heavy = [m for m in ("torch", "pydantic", "rich", "mlacheck.rules", "mlacheck.program.agent") if m in sys.modules]
    assert heavy == []
"""
    )
    result = run(inner)
    assert result.ret == pytest.ExitCode.OK, result.text
    result.assert_outcomes(passed=1)


def test_dead_warmup_is_a_warning_unless_strict(inner):
    inner.makepyfile(test_serving=DEAD_WARMUP)
    lenient = run(inner, *OBSERVE, "--mlacheck-run-dir", "lenient")
    assert lenient.ret == pytest.ExitCode.OK, lenient.text
    lines = section(lenient)
    assert "dead-warmup [warning]" in line_starting(lines, "MLA002 ")
    assert line_starting(lines, "verdict: ").startswith("verdict: PASS  0 error(s), 1 warning(s)")
    strict = run(inner, *OBSERVE, "--mlacheck-run-dir", "strict", "--mlacheck-strict")
    assert strict.ret == pytest.ExitCode.TESTS_FAILED, strict.text
    assert line_starting(section(strict), "verdict: ").startswith("verdict: FAIL  0 error(s), 1 warning(s) (strict")


def test_python_subprocess_of_a_test_is_observed_and_the_environment_restored(inner):
    inner.makeconftest("""
import json, os
import pytest

def record(name):
    with open(name, "w") as out:
        json.dump({name: os.environ.get(name) for name in ("PYTHONPATH", "MLACHECK_RUN_DIR")}, out)

@pytest.hookimpl(tryfirst=True)
def pytest_configure(config):
    record("environment-before.json")

@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config):
    record("environment-after.json")
""")
    inner.makepyfile(
        test_child="""
import os, subprocess, sys

CHILD = "import os; from tests.fixtures import synthetic_kernels as k; k.dispatch(1, 'bf16', True); print(os.getpid())"

def test_child_process_dispatches():
    assert os.environ["MLACHECK_RUN_DIR"].endswith("run")
    assert os.environ["PYTHONPATH"].split(os.pathsep)[0].endswith(os.path.join("mlacheck", "program", "bootstrap"))
    child = subprocess.run([sys.executable, "-c", CHILD], check=True, capture_output=True, text=True)
    with open("pids.txt", "w") as out:
        out.write(f"{os.getpid()} {child.stdout.strip()}")
"""
    )
    result = run(inner, *OBSERVE, "--mlacheck-run-dir", "run", "--mlacheck-json", "report.json")
    assert result.ret == pytest.ExitCode.TESTS_FAILED, result.text
    result.assert_outcomes(passed=1)
    pytest_pid, child_pid = map(int, (inner.path / "pids.txt").read_text().split())
    report = json.loads((inner.path / "report.json").read_text())
    [finding] = [f for f in report["findings"] if f["code"] == "MLA001"]
    assert finding["key"] == {"dtype": "bf16", "causal": True}
    assert finding["process"]["pid"] == child_pid != pytest_pid
    assert sorted(p["pid"] for p in report["processes"]) == sorted([pytest_pid, child_pid])
    assert f"[pid {child_pid}]" in line_starting(section(result), "MLA001 ")
    before = json.loads((inner.path / "environment-before.json").read_text())
    after = json.loads((inner.path / "environment-after.json").read_text())
    assert before["MLACHECK_RUN_DIR"] is None and str(ROOT) in before["PYTHONPATH"]
    assert after == before


def test_json_report_holds_the_finding(inner):
    inner.makepyfile(test_serving=SERVING_COMPILE)
    result = run(inner, *OBSERVE, "--mlacheck-json", "report.json")
    assert result.ret == pytest.ExitCode.TESTS_FAILED, result.text
    report = json.loads((inner.path / "report.json").read_text())
    assert report["verdict"] == "fail" and report["mode"] == "program"
    assert [(f["code"], f["key"]) for f in report["findings"] if f["severity"] == "error"] == [
        ("MLA001", {"dtype": "fp8", "causal": False})
    ]
    assert report["program"]["command"][0] == "pytest"
    # the default run folder: mlacheck-runs/<time>-<pid> under the session's working folder
    [run_dir] = [path for path in (inner.path / "mlacheck-runs").iterdir() if path.name != ".gitignore"]
    assert (inner.path / "mlacheck-runs" / ".gitignore").read_text().endswith("\n*\n")  # runs stay out of git
    assert line_starting(section(result), "run folder: ") == f"run folder: {run_dir}"
    assert (run_dir / "meta.json").exists()


def test_bad_rules_path_is_a_usage_error(inner):
    inner.makepyfile(test_serving=CORRECT_WARMUP)
    result = run(inner, "--mlacheck", "--mlacheck-rules", "no-such-rules.toml")
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.text
    assert "no-such-rules.toml" in result.text and "--mlacheck-rules" in result.text and "Traceback" not in result.text
    assert not (inner.path / "mlacheck-runs").exists()


def test_an_already_observed_pytest_is_refused(inner, monkeypatch):
    inner.makepyfile(test_serving=CORRECT_WARMUP)
    monkeypatch.setenv("MLACHECK_RUN_DIR", str(inner.path / "outer-run"))
    result = run(inner, *OBSERVE)
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.text
    assert "already observed" in result.text


def test_a_used_run_folder_is_refused(inner):
    inner.makepyfile(test_serving=CORRECT_WARMUP)
    (inner.path / "run").mkdir()
    (inner.path / "run" / "trace-1.jsonl").write_text("")
    result = run(inner, *OBSERVE, "--mlacheck-run-dir=run")
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.text
    assert "--mlacheck-run-dir=run: not empty" in result.text


def test_plugin_options_of_program_mode(inner):
    """--mlacheck-compile=skip, --mlacheck-dry, --mlacheck-context and --mlacheck-output reach the run."""
    inner.makepyfile(
        test_contract=HEADER
        + """
def test_bf16_warmup_and_dispatch():
    k.warmup(dtypes=("bf16",), causal=(True,))
    assert k.dispatch(1, "bf16", True) is not None
"""
    )
    result = run(
        inner,
        *OBSERVE,
        "--mlacheck-run-dir=run",
        "--mlacheck-compile=skip",
        "--mlacheck-dry",
        "--mlacheck-context=kv_cache_dtype=fp8",
        "--mlacheck-output=sarif:r.sarif",
        "--mlacheck-output=json:r.json",
    )
    assert result.ret == pytest.ExitCode.TESTS_FAILED, result.text
    report = json.loads((inner.path / "r.json").read_text())
    assert [f["code"] for f in report["findings"]] == ["MLA003"] and report["compile_policy"] == "skip"
    assert report["program"]["dry"] is True and json.loads((inner.path / "r.sarif").read_text())["version"] == "2.1.0"
    assert line_starting(section(result), "MLA003 ")


def test_an_incomplete_check_fails_a_passing_session_unless_allowed(inner):
    inner.makepyfile(test_nothing="def test_no_kernels():\n    assert True\n")
    result = run(inner, *OBSERVE, "--mlacheck-run-dir=run")
    assert result.ret == 2, result.text
    assert line_starting(section(result), "verdict: ").startswith("verdict: INCOMPLETE")
    allowed = run(inner, *OBSERVE, "--mlacheck-run-dir=run2", "--mlacheck-allow-incomplete")
    assert allowed.ret == pytest.ExitCode.OK, allowed.text


CLEARED = (
    HEADER
    + """
import os, subprocess, sys

WORKER = "from tests.fixtures import synthetic_kernels as k; k.dispatch(1, 'fp8', False); import time; time.sleep(0.5)"


def test_workers_with_a_cleared_environment(tmp_path):
    k.warmup(dtypes=("fp8",), causal=(True,))
    k.dispatch(1, "fp8", True)
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": os.environ["PYTHONPATH"].split(os.pathsep)[-1]}
    subprocess.run([sys.executable, "-c", WORKER], env=env, check=True)  # found through the registry
    subprocess.run([sys.executable, "-S", "-c", WORKER], env=env, check=True)  # nothing of mlacheck starts in it
"""
)


def test_a_tests_cleared_environment_subprocess_is_observed_or_named(inner):
    """One worker with a cleared environment is observed through the registry (its MLA001 is its own); one started
    with -S runs nothing of mlacheck: the session's process tree names it, and the session is incomplete."""
    inner.makepyfile(test_cleared=CLEARED)
    result = run(inner, *OBSERVE, "--mlacheck-run-dir=run", "--mlacheck-json=report.json")
    assert result.ret == 1, result.text  # the MLA001 fails it; the unobserved worker alone would make it incomplete
    report = json.loads((inner.path / "report.json").read_text())
    tree = json.loads((inner.path / "run" / "processes.json").read_text())  # its root is the pytest process
    [finding] = [f for f in report["findings"] if f["code"] == "MLA001"]
    assert finding["process"]["pid"] != tree["root"] and tree["root"] in [p["pid"] for p in report["processes"]]
    [reason] = report["incomplete"]
    assert reason.startswith("a Python process ran unobserved: pid ") and " -S -c " in reason


TRITON_TEST = """
import torch, triton, triton.language as tl
import mlacheck


@triton.jit
def copy(x_ptr, y_ptr, n, stride, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs * stride, mask=offs < n), mask=offs < n)


def test_a_triton_kernel_served_with_a_stride_its_warm_up_never_had():
    x = torch.zeros(1024)
    copy[(1,)](x, x, 512, 1, BLOCK=128)
    mlacheck.serving_started()
    assert copy[(1,)](x, x, 512, 2, BLOCK=128) is None  # --mlacheck-dry: nothing compiled, nothing launched
"""


def test_dry_triton_keys_for_the_target_arch_fail_a_passing_session(inner):
    """`pytest --mlacheck-dry --mlacheck-arch sm_90a` on a CPU: the bundled rules watch every Triton kernel."""
    inner.makepyfile(test_triton=TRITON_TEST)
    result = run(
        inner, "--mlacheck", "--mlacheck-dry", "--mlacheck-compile=skip", "--mlacheck-arch=sm_90a", "--mlacheck-json",
        "report.json",
    )  # fmt: skip
    assert result.ret == pytest.ExitCode.TESTS_FAILED, result.text
    report = json.loads((inner.path / "report.json").read_text())
    assert report["target_arch"] == "sm_90a"
    [finding, dead] = report["findings"]  # the warm-up's stride 1 is never launched while serving: dead warm-up
    assert finding["family"] == "triton:test_triton.copy" and finding["diff"] == {"stride": ["==1", "i32 not%16"]}
    assert dead["code"] == "MLA002" and dead["key"]["stride"] == "==1"
    assert "1 passed" in result.text
