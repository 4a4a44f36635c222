"""Program mode through the real CLI: backend-like programs in one process and in several."""

import json
import os
import sys

import pytest

from tests.integration.cli import ROOT, run_cli

RULES = str(ROOT / "tests" / "fixtures" / "synthetic.toml")
BACKEND = str(ROOT / "tests" / "fixtures" / "programs" / "backend.py")
ENV = {"PYTHONPATH": str(ROOT)}


def observe(tmp_path, *program_args, rules=RULES):
    run_dir = tmp_path / "run"
    result = run_cli(
        "run",
        "--rules",
        rules,
        "--run-dir",
        str(run_dir),
        "--",
        sys.executable,
        BACKEND,
        *program_args,
        tmp_path=tmp_path,
        env_extra=ENV,
    )
    return result, run_dir


def serving(report):
    return sorted(
        (f["key"]["dtype"], f["key"]["causal"], f["process"]["rank"])
        for f in report["findings"]
        if f["code"] == "MLA001"
    )


def test_one_process_backend(tmp_path):
    result, run_dir = observe(tmp_path)
    assert result.code == 1, result.stdout + result.stderr
    report = result.report
    assert report["mode"] == "program" and report["program"]["exit_code"] == 0
    assert serving(report) == [("fp8", False, 0)]
    [finding] = report["findings"]
    line = next(n for n, text in enumerate(open(BACKEND), 1) if "not precompiled: a serving-path compile" in text)
    assert finding["site"].endswith(f"backend.py:{line}")  # the line that called dispatch
    assert [p["rank"] for p in report["processes"]] == [0] and report["processes"][0]["exited"]
    assert "backend done" in result.stdout
    assert (run_dir / "meta.json").exists() and len(list(run_dir.glob("trace-*.jsonl"))) == 1


def test_spawned_workers_compile_on_the_serving_path_in_their_own_rank(tmp_path):
    result, _ = observe(tmp_path, "spawn", "2")
    assert result.code == 1, result.stdout + result.stderr
    assert serving(result.report) == [("fp8", False, 0), ("fp8", True, 1), ("fp8", True, 2)]
    # every Python process is observed, multiprocessing's resource tracker too (it inherits RANK=1)
    assert {p["rank"] for p in result.report["processes"]} == {0, 1, 2}


def test_torch_multiprocessing_workers_are_observed(tmp_path):
    result, _ = observe(tmp_path, "torch", "2")
    assert result.code == 1, result.stdout + result.stderr
    assert serving(result.report) == [("fp8", False, 0), ("fp8", True, 1), ("fp8", True, 2)]


def test_forked_workers_inherit_the_warm_cache(tmp_path):
    result, run_dir = observe(tmp_path, "fork", "2")
    assert result.code == 1, result.stdout + result.stderr
    assert serving(result.report) == [("fp8", False, 0)]
    assert len(list(run_dir.glob("trace-*.jsonl"))) == 3  # each forked child writes its own trace
    [variant] = [v for v in result.report["families"][0]["variants"] if v["key"]["causal"] is True]
    assert variant["dispatches"] == 3


def test_python_subprocess_is_observed(tmp_path):
    result, _ = observe(tmp_path, "subprocess")
    keys = serving(result.report)
    assert ("bf16", True, 0) in [(d, c, 0) for d, c, _ in keys] and len(keys) == 2
    assert len(result.report["processes"]) == 2


def test_crash_is_reported_with_the_program_exit_code(tmp_path):
    result, _ = observe(tmp_path, "crash")
    assert result.code == 1
    assert result.report["program"]["exit_code"] == 1
    assert "RuntimeError: backend crashed" in result.stderr
    assert serving(result.report) == [("fp8", False, 0)]


def test_sigkill_keeps_what_was_recorded(tmp_path):
    result, run_dir = observe(tmp_path, "kill")
    assert result.report["program"]["signal"] == "SIGKILL" and result.code == 1
    # killed before its exit event, the process's rank is what RANK said at start: unset here
    assert serving(result.report) == [("fp8", False, None)]
    assert not result.report["processes"][0]["exited"]
    # every variant's first-seen event was written at once; its count is "at least" what was written before the kill
    variants = {v["key"]["causal"]: v for v in result.report["families"][0]["variants"]}
    assert variants[True]["dispatches"] >= 1 and variants[True]["dispatches_at_least"]
    assert variants[False]["serving_path_compile_s"] is not None and variants[False]["dispatches_at_least"]
    assert "≥" in result.stdout
    again = run_cli("report", str(run_dir), "--json", str(tmp_path / "again.json"))
    assert again.code == 1
    assert serving(json.loads((tmp_path / "again.json").read_text())) == serving(result.report)


def test_clean_program_passes_through_its_exit_code(tmp_path):
    program = tmp_path / "clean.py"
    program.write_text(
        "from tests.fixtures import synthetic_kernels as k\nk.warmup(dtypes=('fp8',), causal=(True, False))\n"
        "k.dispatch(1, 'fp8', True); k.dispatch(1, 'fp8', False)\nraise SystemExit(3)\n"
    )
    result = run_cli(
        "run",
        "--rules",
        RULES,
        "--run-dir",
        str(tmp_path / "run"),
        "--",
        sys.executable,
        str(program),
        tmp_path=tmp_path,
        env_extra=ENV,
    )
    assert result.code == 3 and result.report["verdict"] == "pass" and result.report["findings"] == []


def test_missing_command_is_one_line(tmp_path):
    result = run_cli("run", "--rules", RULES, "--run-dir", str(tmp_path / "run"), "--", "no-such-program-xyz")
    assert result.code == 2 and "no-such-program-xyz" in result.stderr and "Traceback" not in result.stderr


def test_the_environment_is_left_as_it_was(tmp_path):
    import site
    from importlib.metadata import distribution

    installed = {folder: sorted(os.listdir(folder)) for folder in site.getsitepackages()}
    before = os.environ.get("PYTHONPATH")
    observe(tmp_path)
    assert os.environ.get("PYTHONPATH") == before
    # the run writes nothing into any installation; the only .pth of mlacheck's is the one its distribution installed
    assert {folder: sorted(os.listdir(folder)) for folder in site.getsitepackages()} == installed
    shipped = {file.name for file in distribution("mlacheck").files if file.name.endswith(".pth")}
    for names in installed.values():
        ours = [name for name in names if "mlacheck" in name and name.endswith(".pth") and "__editable__" not in name]
        assert set(ours) <= shipped, ours


@pytest.mark.compile
def test_real_tokenspeed_mla_program_without_cuda_fails_on_its_own_and_is_reported(tmp_path):
    program = tmp_path / "engine.py"
    program.write_text(
        "import os, torch, tokenspeed_mla\n"
        "tokenspeed_mla.warmup_compile_prefill(q_dtype=torch.float8_e4m3fn, d_qk=192, d_v=128, enable_pdl=True)\n"
        "q = torch.zeros(4, 16, 192).to(torch.float8_e4m3fn); kv = torch.zeros(4, 16, 192).to(torch.float8_e4m3fn)\n"
        "cu = torch.tensor([0, 4], dtype=torch.int32)\n"
        "tokenspeed_mla.tokenspeed_mla_prefill(q, kv, kv[..., :128], cu[1:], cu, 4, 1, 0.1, True, False, enable_pdl=True)\n"
    )
    result = run_cli(
        "run",
        "--compile",
        "skip",
        "--run-dir",
        str(tmp_path / "run"),
        "--",
        sys.executable,
        str(program),
        tmp_path=tmp_path,
        env_extra={"CUTE_DSL_ARCH": "sm_100a"},
    )
    report = result.report
    assert report["program"]["exit_code"] == 1 and "Traceback" in result.stderr  # the program's own failure
    [prefill] = [f for f in report["families"] if f["name"] == "tokenspeed_mla.prefill"]
    assert len(prefill["variants"]) == 2 and all(v["status"] == "unverified" for v in prefill["variants"])
    assert prefill["died_before_lookup"] == 1 and report["verdict"] == "incomplete" and result.code == 2
    [reason] = report["incomplete"]
    assert "1 of 1 tokenspeed_mla_prefill call(s) raised before the cache lookup" in reason
    assert report["target_arch"] == "sm_100a"


def test_report_merges_runs_of_several_nodes(tmp_path):
    (tmp_path / "node0").mkdir()
    (tmp_path / "node1").mkdir()
    observe(tmp_path / "node0")
    observe(tmp_path / "node1", "spawn", "1")
    merged = run_cli(
        "report",
        str(tmp_path / "node0" / "run"),
        str(tmp_path / "node1" / "run"),
        "--json",
        str(tmp_path / "merged.json"),
    )
    assert merged.code == 1, merged.stdout + merged.stderr
    report = json.loads((tmp_path / "merged.json").read_text())
    assert len(report["program"]["runs"]) == 2
    assert serving(report) == [("fp8", False, 0), ("fp8", False, 0), ("fp8", True, 1)]
    [variant] = [v for v in report["families"][0]["variants"] if v["key"]["causal"] is False]
    assert variant["dispatches"] == 2
    markdown = run_cli(
        "report", str(tmp_path / "node0" / "run"), str(tmp_path / "node1" / "run"), "--output", "markdown:-"
    )
    programs = [line for line in markdown.stdout.splitlines() if line.startswith("| program |")]
    assert len(programs) == 2 and all("backend.py" in line and "(exit code 0)" in line for line in programs)


def test_a_garbage_line_loses_that_line_only(tmp_path):
    first, run_dir = observe(tmp_path)
    [trace] = run_dir.glob("trace-*.jsonl")
    lines = trace.read_text().splitlines(keepends=True)
    trace.write_text(lines[0] + "garbage\n" + "".join(lines[1:]))
    result = run_cli("report", str(run_dir), "--json", str(tmp_path / "again.json"))
    again = json.loads((tmp_path / "again.json").read_text())
    assert result.code == 1 and "Traceback" not in result.stderr
    assert again["bad_lines"] == [f"{trace}:2"] and f"{trace}:2" in result.stdout
    assert again["incomplete"] == [f"events were lost: {trace}:2 could not be read"]
    assert serving(again) == serving(first.report) and again["families"] == first.report["families"]


@pytest.mark.parametrize("value", ["-Infinity", "Infinity", "NaN"])
def test_a_time_that_is_not_a_finite_number_loses_that_line_only_and_every_output_is_written(tmp_path, value):
    """JSON's parser takes NaN and Infinity: a compile whose seconds is one was drawn at no place on the timeline (the
    HTML writer raised)."""
    first, run_dir = observe(tmp_path)
    [trace] = run_dir.glob("trace-*.jsonl")
    lines = trace.read_text().splitlines(keepends=True)
    at = next(n for n, line in enumerate(lines) if json.loads(line)["type"] == "compile")
    event = json.loads(lines[at])
    lines[at] = json.dumps(event | {"seconds": float(value)}) + "\n"
    trace.write_text("".join(lines))
    html, saved = tmp_path / "report.html", tmp_path / "again.json"
    result = run_cli("report", str(run_dir), "--json", str(saved), "--output", f"html:{html}")
    again = json.loads(saved.read_text())
    assert result.code in (1, 2) and "Traceback" not in result.stderr, result.stdout + result.stderr
    line = f"{trace}:{at + 1} (a compile event whose seconds is not a finite number)"
    assert again["verdict"] != "pass" and again["bad_lines"] == [line], again["bad_lines"]
    assert any(text.startswith(f"events were lost: {trace}:{at + 1}") for text in again["incomplete"]), again
    assert html.read_text().rstrip().endswith("</html>")


def test_truncated_last_line_is_read_as_truncated(tmp_path):
    _, run_dir = observe(tmp_path)
    [trace] = run_dir.glob("trace-*.jsonl")
    trace.write_text(trace.read_text() + '{"type": "dispatch", "fam')
    result = run_cli("report", str(run_dir), "--json", str(tmp_path / "r.json"))
    assert result.code == 1, result.stderr
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["processes"][0]["truncated"] and serving(report) == [("fp8", False, 0)]
    assert report["incomplete"] == [
        f"events were lost: {trace} ends in a cut-short line (its process was killed while writing it)"
    ]
