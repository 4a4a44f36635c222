"""Program mode reaches every process of the run: a worker started with a cleared environment, a process tree that
puts itself in sessions of its own (as Ray does), and run folders of several nodes merged into one per-rank report."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from tests.fixtures.interpreters import without_site_packages
from tests.integration.cli import ROOT, run_cli
from tests.processes import alive

RULES = str(ROOT / "tests" / "fixtures" / "synthetic.toml")
ENV = {"PYTHONPATH": str(ROOT)}
WARM = "from tests.fixtures import synthetic_kernels as k\nk.warmup(dtypes=('fp8',), causal=(True,))\n"
# a server's worker, started with an environment of its own: none of the run's variables, its own PYTHONPATH; it
# dispatches a variant that no warm-up built, so it compiles on the serving path
WORKER = (
    "import os, time\nfrom tests.fixtures import synthetic_kernels as k\nk.dispatch(1, 'fp8', False)\n"
    "open(os.environ['PID_FILE'], 'w').write(str(os.getpid()))\ntime.sleep(0.5)\n"
)


def observe(tmp_path, *command, rules=RULES, env=ENV):
    tmp_path.mkdir(parents=True, exist_ok=True)
    return run_cli(
        "run", "--rules", rules, "--run-dir", str(tmp_path / "run"), "--", *command, tmp_path=tmp_path, env_extra=env
    )


def program(tmp_path, text):
    path = tmp_path / "program.py"
    path.write_text(text)
    return str(path)


def cleared_environment_server(tmp_path, interpreter: list[str], rank: int | None = None) -> str:
    """A server that warms up, dispatches what it warmed, and starts its worker with a cleared environment."""
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(ROOT), "PID_FILE": str(tmp_path / "worker.pid")}
    if rank is not None:
        env["RANK"] = str(rank)
    return program(
        tmp_path,
        WARM + "k.dispatch(1, 'fp8', True)\nimport subprocess\n"
        f"subprocess.run({interpreter!r} + ['-c', {WORKER!r}], env={env!r}, check=True)\n",
    )


def test_mlacheck_installs_its_start_path():
    """The .pth that `pip install` (editable or not) puts in site-packages is the repository's."""
    from importlib.metadata import distribution

    [pth] = [file for file in distribution("mlacheck").files if file.name == "mlacheck-startup.pth"]
    assert str(pth) == "mlacheck-startup.pth"  # at the top of site-packages, where `site` reads .pth files
    assert pth.locate().read_text() == (ROOT / "mlacheck-startup.pth").read_text()


def test_a_worker_with_a_cleared_environment_is_observed_through_the_registry(tmp_path):
    result = observe(tmp_path, sys.executable, cleared_environment_server(tmp_path, [sys.executable]))
    assert result.code == 1, result.stdout + result.stderr
    worker = int((tmp_path / "worker.pid").read_text())
    [finding] = [f for f in result.report["findings"] if f["code"] == "MLA001"]
    assert finding["key"] == {"dtype": "fp8", "causal": False} and finding["process"]["pid"] == worker
    run_event = json.loads((tmp_path / "run" / f"trace-{worker}.jsonl").read_text().splitlines()[0])
    assert run_event["found_by"] == "registry" and result.report["incomplete"] == []


@pytest.mark.parametrize("how", ["no site (-S)", "an interpreter without mlacheck", "an engine embedding Python"])
def test_a_worker_that_nothing_of_mlacheck_reaches_makes_the_run_incomplete(tmp_path, how):
    """Nothing of mlacheck runs in the worker, so nothing of it is recorded: the supervisor saw it run, and the run
    names it and is incomplete, not a pass. The interpreter without mlacheck is this one's with a prefix of its own
    (its standard library, no site-packages); the engine is the same named `engine`, found to be Python by the
    libpython it maps, not by its name."""
    if how == "no site (-S)":
        interpreter = [sys.executable, "-S"]
    else:
        interpreter = [without_site_packages(tmp_path, "engine" if "engine" in how else "python3")]
    result = observe(tmp_path, sys.executable, cleared_environment_server(tmp_path, interpreter, rank=3))
    assert result.code == 2 and result.report["verdict"] == "incomplete", result.stdout + result.stderr
    worker = int((tmp_path / "worker.pid").read_text())
    [reason] = result.report["incomplete"]
    assert reason.startswith(f"a Python process ran unobserved: pid {worker} (") and "wrote no trace" in reason
    assert [r["unobserved_pids"] for r in result.report["ranks"] if r["rank"] == 3] == [[worker]]
    assert "PASS" not in result.stdout


SPAWNS = {
    "subprocess": "subprocess.run(child, env=env, check=True)",
    "os.posix_spawn": "os.waitpid(os.posix_spawn(child[0], child, env), 0)",
}


@pytest.mark.parametrize("how", sorted(SPAWNS))
def test_a_python_child_that_ends_before_any_poll_and_wrote_no_trace_is_named_by_its_parent(tmp_path, how):
    """A worker started with -S that ends at once (nothing of mlacheck in it, and gone before the process tree's next
    poll, most times) compiles nothing we could see: the run is incomplete, naming it, and its rank from the
    environment it was given. The parent's trace says it started it (`spawn`), so the report names it even where the
    tree has no record of it (processes.json gone)."""
    text = WARM + (
        "import os, subprocess, sys\nk.dispatch(1, 'fp8', True)\n"
        "child = [sys.executable, '-S', '-c', 'pass']\nenv = {'PATH': os.environ['PATH'], 'RANK': '5'}\n"
        f"{SPAWNS[how]}\n"
    )
    result = observe(tmp_path, sys.executable, program(tmp_path, text))
    assert result.code == 2 and result.report["verdict"] == "incomplete", result.stdout + result.stderr
    [reason] = result.report["incomplete"]
    [row] = [row for row in result.report["ranks"] if row["rank"] == 5]
    [child] = row["unobserved_pids"]
    assert reason.startswith(f"a Python process ran unobserved: pid {child} (") and "wrote no trace" in reason
    (tmp_path / "run" / "processes.json").unlink()
    again = run_cli("report", str(tmp_path / "run"), "--json", str(tmp_path / "again.json"))
    assert again.code == 2, again.stdout + again.stderr
    [reason] = json.loads((tmp_path / "again.json").read_text())["incomplete"]
    main = result.report["processes"][0]["pid"]
    assert f"pid {child} ({sys.executable} -S -c pass), started by pid {main}" in reason


def test_a_python_child_that_only_says_its_version_or_help_runs_no_code_and_the_run_passes(tmp_path):
    """`python --version` or `-h` ends before any code (site included) runs: nothing of mlacheck starts in it, and
    nothing could compile in it. It is not a worker that ran unobserved."""
    text = WARM + (
        "import subprocess, sys\nk.dispatch(1, 'fp8', True)\n"
        "for flags in (['--version'], ['-V'], ['-h']):\n"
        "    subprocess.run([sys.executable, *flags], check=True, stdout=subprocess.DEVNULL)\n"
    )
    result = observe(tmp_path, sys.executable, program(tmp_path, text))
    assert result.code == 0 and result.report["incomplete"] == [], result.stdout + result.stderr


def test_a_process_outside_the_run_is_not_observed_while_a_run_is_active(tmp_path):
    """The registry is found through ancestry only: a Python process of the same user started elsewhere while a run
    is registered starts no agent and writes nothing into the run."""
    started = tmp_path / "started"
    text = WARM + f"k.dispatch(1, 'fp8', True)\nimport time\nopen({str(started)!r}, 'w').close()\ntime.sleep(3)\n"
    mlacheck = subprocess.Popen(
        [sys.executable, "-m", "mlacheck", "run", "--rules", RULES, "--run-dir", str(tmp_path / "run"), "--"]
        + [sys.executable, program(tmp_path, text)],
        cwd=ROOT,
        env={**os.environ, **ENV},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 60
    while not started.exists():
        assert time.monotonic() < deadline and mlacheck.poll() is None
        time.sleep(0.05)
    outsider = subprocess.run(
        [sys.executable, "-c", "from mlacheck.program import agent; print(agent.current())"],
        env={"PATH": os.environ["PATH"], "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        cwd="/",
    )
    mlacheck.wait(timeout=60)
    assert outsider.stdout.strip() == "None" and outsider.stderr == ""
    assert len(list((tmp_path / "run").glob("trace-*.jsonl"))) == 1


SESSIONS = """
import subprocess, sys, time
grandchild = subprocess.Popen(["sleep", "120"], start_new_session=True)
print("grandchild", grandchild.pid, flush=True)
time.sleep(120)
"""


def test_a_tree_in_sessions_of_its_own_is_ended_by_the_ids_recorded_and_the_report_says_so(tmp_path):
    """The program starts a Python child in a session of its own, which starts a grandchild in another, and exits:
    neither is in the program's process group, so a group signal would miss both; mlacheck ends them."""
    text = (
        WARM + "k.dispatch(1, 'fp8', True)\nimport subprocess, sys\n"
        f"child = subprocess.Popen([sys.executable, '-c', {SESSIONS!r}], start_new_session=True,"
        " stdout=subprocess.PIPE, text=True)\n"
        "print('pids', child.pid, child.stdout.readline().split()[1], flush=True)\n"
    )
    result = observe(tmp_path, sys.executable, program(tmp_path, text))
    [line] = [line for line in result.stdout.splitlines() if line.startswith("pids")]
    pids = [int(pid) for pid in line.split()[1:]]
    for pid in pids:
        assert not alive(pid), f"process {pid} outlived mlacheck"
    meta = json.loads((tmp_path / "run" / "meta.json").read_text())
    assert sorted(p["pid"] for p in meta["left_behind"]) == sorted(pids)
    assert all(p["ended_by"] == "SIGTERM" for p in meta["left_behind"]) and meta["remnants_ended"] == 1
    assert len({p["sid"] for p in meta["left_behind"]}) == 2  # each in a session of its own
    assert result.report["program"]["left_behind"] == meta["left_behind"]
    assert "mlacheck ended 2 process(es) the program left running" in " ".join(result.stdout.replace("│", " ").split())
    markdown = run_cli("report", str(tmp_path / "run"), "--output", "markdown:-").stdout
    assert (
        f"mlacheck ended 2 process(es) the program left running: {pids[0]} (SIGTERM), {pids[1]} (SIGTERM)" in markdown
    )
    assert result.code == 0 and result.report["verdict"] == "pass", result.stdout + result.stderr


def test_a_signal_ends_a_tree_in_sessions_of_its_own(tmp_path):
    """SIGTERM to mlacheck while the program runs: the group gets it; the processes in sessions of their own are
    ended after the main process, by their recorded ids."""
    text = (
        WARM + "k.dispatch(1, 'fp8', True)\nimport subprocess, sys, time\n"
        f"child = subprocess.Popen([sys.executable, '-c', {SESSIONS!r}], start_new_session=True,"
        " stdout=subprocess.PIPE, text=True)\n"
        "print('pids', child.pid, child.stdout.readline().split()[1], flush=True)\ntime.sleep(120)\n"
    )
    mlacheck = subprocess.Popen(
        [sys.executable, "-m", "mlacheck", "run", "--rules", RULES, "--run-dir", str(tmp_path / "run"), "--"]
        + [sys.executable, program(tmp_path, text)],
        cwd=ROOT,
        env={**os.environ, **ENV},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    line = mlacheck.stdout.readline()
    while not line.startswith("pids"):
        assert line, mlacheck.stderr.read()
        line = mlacheck.stdout.readline()
    pids = [int(pid) for pid in line.split()[1:]]
    time.sleep(0.3)
    mlacheck.send_signal(signal.SIGTERM)
    mlacheck.communicate(timeout=60)
    for pid in pids:
        assert not alive(pid), f"process {pid} outlived mlacheck"
    meta = json.loads((tmp_path / "run" / "meta.json").read_text())
    assert meta["forwarded"] == ["SIGTERM"] and sorted(p["pid"] for p in meta["left_behind"]) == sorted(pids)


def test_engines_that_copy_variables_to_their_workers_copy_mlachecks(tmp_path):
    """vLLM copies the variables whose names start with a prefix listed in VLLM_RAY_EXTRA_ENV_VAR_PREFIXES_TO_COPY to
    its Ray actors (engines.toml); the program's environment lists MLACHECK_ there, after the user's own."""
    rules = ROOT / "mlacheck" / "rulefiles" / "bundled"
    (tmp_path / "rules").mkdir()
    for name in ("synthetic.toml",):
        (tmp_path / "rules" / name).write_text(open(RULES).read())
    (tmp_path / "rules" / "engines.toml").write_text((rules / "engines.toml").read_text())
    text = (
        WARM
        + "k.dispatch(1, 'fp8', True)\nimport os\nprint('copied', os.environ['VLLM_RAY_EXTRA_ENV_VAR_PREFIXES_TO_COPY'])\n"
    )
    result = observe(
        tmp_path,
        sys.executable,
        program(tmp_path, text),
        rules=str(tmp_path / "rules"),
        env={**ENV, "VLLM_RAY_EXTRA_ENV_VAR_PREFIXES_TO_COPY": "MY_"},
    )
    assert result.code == 0, result.stdout + result.stderr
    assert "copied MY_,MLACHECK_" in result.stdout


def test_env_prints_what_a_worker_outside_the_run_needs(tmp_path):
    run_dir = tmp_path / "run"
    observe(tmp_path, sys.executable, program(tmp_path, WARM + "k.dispatch(1, 'fp8', True)\n"))
    shell = run_cli("env", "--run-dir", str(run_dir))
    assert shell.code == 0 and shell.stdout == f"export MLACHECK_RUN_DIR={run_dir}\n" and shell.stderr == ""
    ray = run_cli("env", "--ray", "--run-dir", str(run_dir))
    assert json.loads(ray.stdout) == {"env_vars": {"MLACHECK_RUN_DIR": str(run_dir)}}
    inside = observe(tmp_path / "inside", sys.executable, "-m", "mlacheck", "env", "--ray")
    assert json.dumps({"env_vars": {"MLACHECK_RUN_DIR": str(tmp_path / "inside" / "run")}}) in inside.stdout
    later = run_cli("env", "--run-dir", str(tmp_path / "later"))
    assert later.code == 0 and "is not a run folder yet" in later.stderr
    none = run_cli("env", env_extra={"MLACHECK_RUN_DIR": ""})
    assert none.code == 2 and none.stderr.startswith("mlacheck: error: no run: give --run-dir")


NODE1 = (
    WARM + "import multiprocessing, os, subprocess, sys\n"
    "def idle():\n    import tests.fixtures.synthetic_kernels\n"
    "if __name__ == '__main__':\n"
    "    os.environ['RANK'] = '0'\n    k.dispatch(1, 'fp8', True)\n"
    "    os.environ['RANK'] = '1'\n    worker = multiprocessing.get_context('spawn').Process(target=idle)\n"
    "    worker.start(); worker.join()\n    os.environ['RANK'] = '0'\n"
    "    env = {'PATH': os.environ['PATH'], 'PYTHONPATH': os.getcwd(), 'RANK': '2'}\n"
    "    subprocess.run([sys.executable, '-S', '-c', 'import time; time.sleep(0.5)'], env=env, check=True)\n"
)


def test_run_folders_of_two_nodes_merge_into_one_per_rank_report(tmp_path):
    """node0: ranks 0 and 1 compile on the serving path. node1: rank 0 dispatches only what it warmed, rank 1 loads
    the family and never dispatches, rank 2 runs unobserved. The merged report says which is which."""
    backend = str(ROOT / "tests" / "fixtures" / "programs" / "backend.py")
    node0 = observe(tmp_path / "node0", sys.executable, backend, "spawn", "1")
    node1 = observe(tmp_path / "node1", sys.executable, program(tmp_path, NODE1))
    assert node0.code == 1 and node1.code == 2, node1.stdout + node1.stderr
    runs = [str(tmp_path / "node0" / "run"), str(tmp_path / "node1" / "run")]
    merged = run_cli("report", *runs, "--json", str(tmp_path / "merged.json"), "--output", "markdown:-")
    assert merged.code == 1, merged.stdout + merged.stderr
    report = json.loads((tmp_path / "merged.json").read_text())
    assert report["format_version"] == 4
    rows = {(row["run"], row["rank"]): row for row in report["ranks"] if row["rank"] is not None}
    status = {key: row["status"] for key, row in rows.items()}
    assert status == {
        (runs[0], 0): "serving-path compile",
        (runs[0], 1): "serving-path compile",
        (runs[1], 0): "ok",
        (runs[1], 1): "never dispatched",
        (runs[1], 2): "unobserved",
    }
    assert rows[(runs[0], 1)]["serving_path_compiles"] == 1 and rows[(runs[1], 0)]["dispatches"] == 1
    [unobserved] = rows[(runs[1], 2)]["unobserved_pids"]
    assert rows[(runs[1], 2)]["pids"] == [] and str(unobserved) in report["incomplete"][0]
    # each MLA001 names its process, and the process its rank
    assert sorted(f["process"]["rank"] for f in report["findings"] if f["code"] == "MLA001") == [0, 1]
    markdown = merged.stdout
    assert "### Per rank" in markdown
    assert f"| {runs[1]} | {report['ranks'][-1]['host']} | 2 | — | 0 | 0 | {unobserved} | — | unobserved |" in markdown
    terminal = run_cli("report", *runs)
    assert "per rank" in terminal.stdout and "never dispatched" in terminal.stdout


RAY_PROGRAM = """
import os, ray
from tests.fixtures import synthetic_kernels as k
k.warmup(dtypes=("fp8",), causal=(True,))
k.dispatch(1, "fp8", True)
ray.init(address="local", num_cpus=1, include_dashboard=False, object_store_memory=80 * 1024 * 1024, log_to_driver=False)

@ray.remote
class Worker:
    def serve(self):
        from tests.fixtures import synthetic_kernels as k
        k.dispatch(1, "fp8", False)  # no warm-up in this process built it: a serving-path compile
        return os.getpid()

print("actor", ray.get(Worker.remote().serve.remote()), flush=True)
os._exit(0)  # no ray.shutdown(): what Ray started is left for mlacheck to end
"""


def test_a_local_ray_clusters_actor_is_observed_and_ray_ends_with_the_run(tmp_path):
    pytest.importorskip("ray", reason="Ray is an optional test extra: pip install 'mlacheck[ray-test]'")
    result = observe(
        tmp_path, sys.executable, program(tmp_path, RAY_PROGRAM), env={**ENV, "RAY_USAGE_STATS_ENABLED": "0"}
    )
    assert result.code == 1, result.stdout + result.stderr
    [actor] = [int(line.split()[1]) for line in result.stdout.splitlines() if line.startswith("actor ")]
    [finding] = [f for f in result.report["findings"] if f["code"] == "MLA001"]
    assert finding["process"]["pid"] == actor and finding["key"] == {"dtype": "fp8", "causal": False}
    recorded = json.loads((tmp_path / "run" / "processes.json").read_text())["processes"]
    assert actor in [p["pid"] for p in recorded]
    assert len({p["pgid"] for p in recorded}) > 1  # Ray puts its processes in groups of their own
    left = [p for p in recorded if alive(p["pid"]) and p["start"] == _start(p["pid"])]
    assert left == [], left
    assert result.report["incomplete"] == [], result.report["incomplete"]


def _start(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return int(stat.read().rsplit(")", 1)[1].split()[19])
    except FileNotFoundError:
        return None
