"""Program mode never passes by mistake: what it did not see makes the verdict incomplete, and says why."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.integration.cli import ROOT, run_cli
from tests.processes import alive

RULES = str(ROOT / "tests" / "fixtures" / "synthetic.toml")
ENV = {"PYTHONPATH": str(ROOT)}
WARM = "from tests.fixtures import synthetic_kernels as k\nk.warmup(dtypes=('fp8',), causal=(True,))\n"


def observe(tmp_path, *command, rules=RULES, options=(), env=ENV):
    tmp_path.mkdir(parents=True, exist_ok=True)
    return run_cli(
        "run",
        "--rules",
        rules,
        "--run-dir",
        str(tmp_path / "run"),
        *options,
        "--",
        *command,
        tmp_path=tmp_path,
        env_extra=env,
    )


def program(tmp_path, text):
    path = tmp_path / "program.py"
    path.write_text(text)
    return str(path)


def test_a_program_that_starts_no_python_is_incomplete(tmp_path):
    result = observe(tmp_path, "sh", "-c", "echo hi")
    assert result.code == 2 and result.report["verdict"] == "incomplete"
    assert result.report["incomplete"] == [
        "no Python process was observed (the program started none, or none could import mlacheck)"
    ]
    assert "exit 2: incomplete" in result.stdout.splitlines()[-1] and "PASS" not in result.stdout


def test_allow_incomplete_keeps_the_verdict_and_passes_the_program_status_through(tmp_path):
    result = observe(tmp_path, "sh", "-c", "exit 3", options=("--allow-incomplete",))
    assert result.code == 3 and result.report["verdict"] == "incomplete"
    assert result.report["exit_reason"] == "exit 3: the program exited 3"


@pytest.mark.parametrize("line, named", [('cache = "_cache"', "_nocache"), ('dispatch = ["dispatch"]', "dispatsh")])
def test_a_rule_that_names_what_the_module_lacks_is_the_rule_s_problem_not_an_internal_error(tmp_path, line, named):
    """A typo in a user's rule file (or a rule gone stale) leaves the family unwatched: said as the rule's, in one line
    that names the name and the rule to fix, never as a bug of mlacheck's nor as a module that was never loaded."""
    rules = tmp_path / "synthetic.toml"
    value = line.split('"')[1]
    rules.write_text(Path(RULES).read_text().replace(line, line.replace(f'"{value}"', f'"{named}"')))
    text = (
        "from tests.fixtures import synthetic_kernels as k\nk.warmup(dtypes=('fp8',), causal=(True,))\nk.dispatch(1)\n"
    )
    result = observe(tmp_path, sys.executable, "-c", text, rules=str(rules))
    assert result.code == 2 and result.report["verdict"] == "incomplete", result.stdout
    assert result.report["internal_errors"] == [] and "internal error" not in result.stdout, result.stdout
    [reason] = result.report["incomplete"]
    assert reason.startswith("synthetic: not watched: ") and repr(named) in reason and "rule" in reason, reason


def test_a_python_program_that_never_loads_the_family_is_incomplete(tmp_path):
    result = observe(tmp_path, sys.executable, "-c", "print('no kernels here')")
    assert result.code == 2
    [reason] = result.report["incomplete"]
    assert "no observed process loaded a watched kernel family (tests.fixtures.synthetic_kernels)" in reason


def test_a_python_process_that_cannot_import_mlacheck_is_named_as_unobserved(tmp_path):
    base = os.path.realpath(getattr(sys, "_base_executable", sys.executable))
    probe = subprocess.run(
        [base, "-c", "import mlacheck"], capture_output=True, cwd="/", env={"PATH": os.environ["PATH"]}
    )
    if probe.returncode == 0:
        pytest.skip("the base interpreter can import mlacheck too")
    # a child with only the bootstrap on its path, under an interpreter that has no mlacheck installed
    child = (
        "import os, subprocess\nbootstrap = os.environ['PYTHONPATH'].split(os.pathsep)[0]\n"
        f"subprocess.run([{base!r}, '-c', 'pass'], cwd='/', env={{**os.environ, 'PYTHONPATH': bootstrap}})\n"
    )
    result = observe(tmp_path, sys.executable, program(tmp_path, WARM + "k.dispatch(1, 'fp8', True)\n" + child))
    assert result.code == 2, result.stdout + result.stderr
    reasons = result.report["incomplete"]
    assert len(reasons) == 1 and reasons[0].startswith("a Python process ran unobserved: pid ")
    assert "ModuleNotFoundError" in reasons[0] and "capture is off in process" in result.stderr


def test_a_family_loaded_but_never_dispatched_is_incomplete_and_its_warmup_unverified(tmp_path):
    result = observe(tmp_path, sys.executable, program(tmp_path, WARM))
    assert result.code == 2
    [reason] = result.report["incomplete"]
    assert "synthetic: loaded, but no dispatch call reached the cache lookup" in reason
    [variant] = result.report["families"][0]["variants"]
    assert variant["status"] == "unverified" and not [f for f in result.report["findings"] if f["code"] == "MLA002"]


def test_dispatches_that_die_before_the_lookup_make_the_run_incomplete(tmp_path):
    text = (
        WARM + "for _ in range(3):\n    try:\n        k.dispatch(None, 'fp8', True)\n"
        "    except ValueError:\n        pass\n"
    )
    result = observe(tmp_path, sys.executable, program(tmp_path, text))
    assert result.code == 2, result.stdout + result.stderr
    [reason] = result.report["incomplete"]
    assert reason == (
        "synthetic: 3 of 3 dispatch call(s) raised before the cache lookup (ValueError: no input), so they "
        "checked nothing"
    )
    assert [v["status"] for v in result.report["families"][0]["variants"]] == ["unverified"]
    assert result.report["findings"] == []


def test_context_makes_a_contract_fire_in_program_mode(tmp_path):
    text = (
        "from tests.fixtures import synthetic_kernels as k\nk.warmup(dtypes=('bf16',), causal=(True,))\n"
        "k.dispatch(1, 'bf16', True)\n"
    )
    without = observe(tmp_path / "a", sys.executable, program(tmp_path, text))
    assert without.code == 0 and without.report["findings"] == []
    assert without.report["not_checked"] == [
        "synthetic: the dtype contract needs kv_cache_dtype (give --context kv_cache_dtype=...)"
    ]
    with_context = observe(
        tmp_path / "b", sys.executable, program(tmp_path, text), options=("--context", "kv_cache_dtype=fp8")
    )
    assert with_context.code == 1
    [finding] = with_context.report["findings"]
    assert (
        finding["code"] == "MLA003"
        and "dtype is bf16, the contract requires fp8 where kv_cache_dtype=fp8" in finding["message"]
    )


def test_the_target_arch_set_inside_the_program_is_the_reports(tmp_path):
    text = "import os\nos.environ['CUTE_DSL_ARCH'] = 'sm_103a'\n" + WARM + "k.dispatch(1, 'fp8', True)\n"
    result = observe(tmp_path, sys.executable, program(tmp_path, text))
    assert result.code == 0, result.stdout + result.stderr
    assert result.report["target_arch"] == "sm_103a"


def test_a_forked_child_that_exits_normally_exited_normally(tmp_path):
    result = run_cli(
        "run",
        "--rules",
        RULES,
        "--run-dir",
        str(tmp_path / "run"),
        "--",
        sys.executable,
        str(ROOT / "tests" / "fixtures" / "programs" / "backend.py"),
        "fork",
        "2",
        tmp_path=tmp_path,
        env_extra=ENV,
    )
    processes = result.report["processes"]
    assert len(processes) == 3 and all(p["exited"] for p in processes)
    assert sum(p["forked_from"] is not None for p in processes) == 2
    assert "did not exit normally" not in result.stdout
    # the children inherited the parent's variants; one they never used is not their dead warm-up
    assert [f for f in result.report["findings"] if f["code"] == "MLA002"] == []


def test_json_to_stdout_is_the_document_alone(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "mlacheck", "run", "--compile", "skip", "--output", "json:-"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env={k: v for k, v in os.environ.items() if k != "CUTE_DSL_ARCH"},
    )
    parsed = subprocess.run([sys.executable, "-m", "json.tool"], input=done.stdout, capture_output=True, text=True)
    assert parsed.returncode == 0, done.stdout[:500]
    assert json.loads(done.stdout)["verdict"] == "pass" and "verdict: PASS" in done.stderr


@pytest.mark.parametrize(
    "args, words",
    [
        (("run", "--tp", "abc"), "Invalid value for '--tp'"),
        (("run", "--profile", "nosuch"), "'nosuch' is not one of"),
        (("run", "--tp", "0"), "--tp 0: the tensor-parallel size is 1 or more"),
        (("run", "--requests", "1"), "--requests 1: the workload needs 2 or more"),
        (("run", "--output", "nosuchformat:x", "--compile", "skip"), "--output nosuchformat:x: unknown format"),
        (("run", "--model", "kimi-k2", "--", "true"), "--model: does not apply to a program"),
        (("run", "--dry"), "--dry: does not apply to the embedded scenario"),
        (("run", "--"), "nothing after --: give the command to observe"),
        (("run", "--dry", "--"), "nothing after --: give the command to observe"),
        (("report", "nosuch-run"), "nosuch-run: no such run folder"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args, words):
    result = run_cli(*args)
    assert result.code == 2, result.stdout + result.stderr
    [line] = result.stderr.strip().splitlines()
    assert line.startswith("mlacheck: error: ") and words in line and "Traceback" not in result.stderr


def test_user_text_is_never_markup(tmp_path):
    result = run_cli("run", "--output", "nosuchformat:x", "--compile", "skip")
    assert ":x" in result.stderr and "❌" not in result.stderr
    odd = tmp_path / "[bold]odd[/bold] :smile:"
    odd.mkdir(parents=True)
    observed = run_cli("run", "--rules", RULES, "--run-dir", str(odd / "run"), "--", "sh", "-c", "echo hi")
    assert "[bold]odd[/bold] :smile:" in observed.stderr.replace("\n", "")


def test_version_option():
    result = run_cli("--version")
    assert result.code == 0 and result.stdout.strip().startswith("mlacheck ")


def test_the_same_run_twice_is_refused_and_a_saved_report_is_accepted(tmp_path):
    observe(tmp_path, sys.executable, program(tmp_path, WARM + "k.dispatch(1, 'fp8', True)\n"))
    twice = run_cli("report", str(tmp_path / "run"), str(tmp_path / "run"))
    assert twice.code == 2 and "given twice" in twice.stderr
    saved = run_cli("report", str(tmp_path / "report.json"))
    assert saved.code == 0 and "verdict: PASS" in saved.stdout


def test_runs_recorded_under_different_rules_are_refused_in_one_line(tmp_path):
    observe(tmp_path / "a", sys.executable, program(tmp_path, WARM + "k.dispatch(1, 'fp8', True)\n"))
    changed = tmp_path / "synthetic.toml"
    changed.write_text(open(RULES).read().replace('why = "the cache holds FP8"', 'why = "changed"'))
    observe(
        tmp_path / "b", sys.executable, program(tmp_path, WARM + "k.dispatch(1, 'fp8', True)\n"), rules=str(changed)
    )
    merged = run_cli("report", str(tmp_path / "a" / "run"), str(tmp_path / "b" / "run"))
    assert merged.code == 2 and "recorded under different versions of this rule file" in merged.stderr
    with_rules = run_cli("report", str(tmp_path / "a" / "run"), str(tmp_path / "b" / "run"), "--rules", RULES)
    assert with_rules.code == 0, with_rules.stdout + with_rules.stderr


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_to_mlacheck_ends_the_whole_process_tree_and_still_reports(tmp_path, signum):
    tree = program(
        tmp_path,
        WARM + "k.dispatch(1, 'fp8', True)\nimport subprocess, sys, time\n"
        "grandchild = \"import subprocess, sys, time; p = subprocess.Popen([sys.executable, '-c', "
        "'import time; time.sleep(120)']); print(p.pid, flush=True); time.sleep(120)\"\n"
        "child = subprocess.Popen([sys.executable, '-c', grandchild], stdout=subprocess.PIPE, text=True)\n"
        "print('pids', child.pid, child.stdout.readline().strip(), flush=True)\ntime.sleep(120)\n",
    )
    env = {**os.environ, **ENV}
    env.pop("CUTE_DSL_ARCH", None)
    json_path = tmp_path / "report.json"
    mlacheck = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "mlacheck",
            "run",
            "--rules",
            RULES,
            "--run-dir",
            str(tmp_path / "run"),
            "--json",
            str(json_path),
            "--",
            sys.executable,
            tree,
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    line = mlacheck.stdout.readline()
    while not line.startswith("pids"):
        assert line, mlacheck.stderr.read()
        line = mlacheck.stdout.readline()
    pids = [int(pid) for pid in line.split()[1:]]
    time.sleep(0.5)
    mlacheck.send_signal(signum)
    out, err = mlacheck.communicate(timeout=60)
    for pid in pids:
        assert not alive(pid), f"process {pid} outlived mlacheck"
    meta = json.loads((tmp_path / "run" / "meta.json").read_text())
    assert meta["forwarded"] == [signal.Signals(signum).name]
    report = json.loads(json_path.read_text())
    assert report["program"]["signal"] == signal.Signals(signum).name or report["program"]["exit_code"] is not None
    assert mlacheck.returncode == report["exit_code"] != 0
    assert report["families"][0]["variants"][0]["dispatches"] == 1


PHASES = """
[[phase]]
phase = "capture"
function = "graph_runner:Runner.capture"
"""
RUNNER = (
    "from tests.fixtures import synthetic_kernels as k\n"
    "class Runner:\n    def capture(self):\n        k.dispatch(1, 'fp8', True)\n        k.dispatch(1, 'fp8', True)\n"
)


def test_a_variant_served_before_a_capture_frame_is_captured_there(tmp_path):
    """Dispatched outside any phase first (a profiling run), then under the engine's capture function: the agent
    marks where the capture function starts and ends, so the lookups under it are capture, not serving."""
    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "synthetic.toml").write_text(open(RULES).read())
    (rules / "engine.toml").write_text(PHASES)
    (tmp_path / "graph_runner.py").write_text(RUNNER)
    text = WARM + "k.dispatch(1, 'fp8', True)\nfrom graph_runner import Runner\nRunner().capture()\n"
    result = observe(
        tmp_path,
        sys.executable,
        program(tmp_path, text),
        rules=str(rules),
        env={"PYTHONPATH": f"{ROOT}{os.pathsep}{tmp_path}"},
    )
    [variant] = result.report["families"][0]["variants"]
    assert variant["captured"] and variant["dispatches"] == 1, variant
    assert result.report["internal_errors"] == []


DRY_ACCEPTANCE = """
import torch, tokenspeed_mla
tokenspeed_mla.warmup_compile_prefill(q_dtype=torch.float8_e4m3fn, d_qk=192, d_v=128, enable_pdl=True)
q, k = (torch.zeros(4, 16, 192).to(torch.float8_e4m3fn) for _ in range(2))
v = torch.zeros(4, 16, 128).to(torch.float8_e4m3fn)
cu = torch.tensor([0, 4], dtype=torch.int32)
out = tokenspeed_mla.tokenspeed_mla_prefill(q, k, v, cu[1:], cu, 4, 1, 0.1, True, False, cum_seq_lens_q=cu,
                                            max_seq_len_q=4, enable_pdl=True)
out, lse = tokenspeed_mla.tokenspeed_mla_prefill(q, k, v, cu[1:], cu, 4, 1, 0.1, True, True, cum_seq_lens_q=cu,
                                                 max_seq_len_q=4, enable_pdl=True)
assert out.shape == (4, 16, 128) and not out.float().abs().sum() and lse.shape == (4, 16)
print("both dispatches returned")
"""


def test_dry_runs_a_real_tokenspeed_mla_program_past_its_lookups_on_the_cpu(tmp_path):
    """The --dry acceptance: real tokenspeed_mla on a CPU machine, its library warm-up then (causal, no LSE) and
    (causal, LSE): one MLA001 on the first, both dispatches counted, the program's own exit 0."""
    result = run_cli(
        "run",
        "--dry",
        "--compile",
        "skip",
        "--run-dir",
        str(tmp_path / "run"),
        "--",
        sys.executable,
        program(tmp_path, DRY_ACCEPTANCE),
        tmp_path=tmp_path,
    )
    assert "both dispatches returned" in result.stdout, result.stdout + result.stderr
    report = result.report
    assert report["program"]["exit_code"] == 0 and result.code == 1
    [finding] = [f for f in report["findings"] if f["code"] == "MLA001"]
    assert (finding["key"]["is_causal"], finding["key"]["return_lse"]) == (True, False)
    assert finding["diff"] == {"return_lse": [True, False]}
    [prefill] = [f for f in report["families"] if f["name"] == "tokenspeed_mla.prefill"]
    assert prefill["dispatch_calls"] == 2 and sum(v["dispatches"] for v in prefill["variants"]) == 2
    assert report["incomplete"] == [] and report["target_arch"] == "sm_100a"
