"""An observed process pays for nothing heavy: importing a watched library installs its capture from capture.json's
plain form (`mlacheck.rulefiles.plain`), and loads nothing of pydantic, typer or rich that the program did not import
itself (redteam section 3: +116 to +292 ms a process before)."""

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("pydantic", "typer", "rich", "mlacheck.rulefiles.schema", "mlacheck.rulefiles.loading")
PROGRAM = f"""
import json, sys
from tests.fixtures import synthetic_kernels as k
k.warmup(dtypes=("fp8",), causal=(True,))
k.dispatch(1)
print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] in {HEAVY!r} or m in {HEAVY!r})))
print(sys.modules["mlacheck.capture.hotpath"].IMPLEMENTATION)
"""
INSPECT = ("inspect", "ast", "dis", "tokenize")  # inspect and what it imports


def observed(tmp_path, modules: tuple[str, ...]) -> tuple[list[str], str, str]:
    """Run the program under `mlacheck run`: which of `modules` it loaded, its traces' text, and which hot path it ran
    (the mlacheck on PYTHONPATH: this checkout's, compiled where it was built in place)."""
    run_dir = tmp_path / "run"
    done = subprocess.run(
        [sys.executable, "-m", "mlacheck", "run", "--rules", str(ROOT / "tests" / "fixtures" / "synthetic.toml")]
        + ["--run-dir", str(run_dir), "--", sys.executable, "-c", PROGRAM.replace(f"{HEAVY!r}", f"{modules!r}")],
        cwd=ROOT,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "COLUMNS": "200"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    loaded, implementation = done.stdout.splitlines()[:2]
    return json.loads(loaded), "".join(t.read_text() for t in run_dir.glob("trace-*.jsonl")), implementation


def test_an_observed_process_has_the_programs_own_sys_path_and_sitecustomize(tmp_path):
    """Where mlacheck's .pth started the agent, the bootstrap folder that `mlacheck run` puts first on PYTHONPATH is
    taken off sys.path (each later import of a top-level module looked there first: about 1 ms a spawned worker,
    issue 29): the program's sys.path is the one it has without mlacheck, the sitecustomize the bootstrap's shadows
    runs once and as `sitecustomize`, as it does unobserved; the environment keeps the folder for the children."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text("import os\nprint('own sitecustomize', os.getpid())\n")
    program = (
        "import json, os, sys; print(json.dumps([sys.path, sys.modules['sitecustomize'].__file__, "
        "os.environ['PYTHONPATH'].split(os.pathsep)[0], os.getpid()]))"
    )
    run_dir = tmp_path / "run"
    done = subprocess.run(
        [sys.executable, "-m", "mlacheck", "run", "-q", "--rules", str(ROOT / "tests" / "fixtures" / "synthetic.toml")]
        + ["--run-dir", str(run_dir), "--allow-incomplete", "--", sys.executable, "-c", program],
        cwd=ROOT,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": os.pathsep.join([str(ROOT), str(site)])},
        capture_output=True,
        text=True,
        timeout=300,
    )
    lines = done.stdout.splitlines()
    path, customize, first, pid = json.loads(next(line for line in lines if line.startswith("[")))
    assert lines.count(f"own sitecustomize {pid}") == 1, done.stdout + done.stderr  # (the CLI's own runs it too)
    bootstrap = ROOT / "mlacheck" / "program" / "bootstrap"
    assert Path(first).resolve() == bootstrap  # the children's environment keeps it
    assert not [entry for entry in path if entry and Path(entry).resolve() == bootstrap], path
    assert str(ROOT) in path and str(site) in path
    assert Path(customize).resolve() == (site / "sitecustomize.py").resolve()
    assert any(run_dir.glob("trace-*.jsonl"))  # it was observed


def test_a_process_that_imports_a_watched_library_loads_no_pydantic_typer_or_rich(tmp_path):
    loaded, traces, _ = observed(tmp_path, HEAVY)
    assert loaded == []
    assert '"type":"compile"' in traces  # it was observed: its family was installed and recorded


def test_a_watched_import_loads_no_inspect_or_hashlib_where_its_family_needs_none(tmp_path):
    """A family without key functions (nothing to fingerprint) whose functions wrap nothing: its install loads no
    inspect (ast, dis, tokenize: about 6 ms) nor hashlib (OpenSSL: about 3 ms) in a process that did not load them
    itself: 64 spawned workers pay it 64 times (issue 29). The pure-Python hot path's forwarder reads a signature
    (inspect): where the checkout's hot path is not built, that much is its own."""
    loaded, traces, implementation = observed(tmp_path, (*INSPECT, "hashlib", "_hashlib", "base64"))
    assert [m for m in loaded if implementation == "c" or m not in INSPECT] == []
    assert '"type":"family"' in traces and '"type":"compile"' in traces  # installed, and it recorded


def test_a_process_that_imports_triton_loads_its_key_reader_only_once_a_kernel_runs(tmp_path):
    """Triton's watcher installs as Triton is imported; what reads a kernel's keys (`capture/triton/keys.py`, and the
    regular expressions it compiles) is loaded when a watched kernel first makes a family, never in a worker that
    imports Triton only for a library's sake (issue 29)."""
    program = (
        "import json, sys, triton; print(json.dumps([name in sys.modules for name in "
        "('mlacheck.capture.triton.capture', 'mlacheck.capture.triton.keys')]))"
    )
    done = subprocess.run(
        [sys.executable, "-m", "mlacheck", "run", "-q", "--rules", str(ROOT / "mlacheck" / "rulefiles" / "bundled")]
        + ["--run-dir", str(tmp_path / "run"), "--allow-incomplete", "--", sys.executable, "-c", program],
        cwd=ROOT,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert json.loads(done.stdout.splitlines()[0]) == [True, False], done.stdout + done.stderr


def test_capture_json_of_another_format_is_refused_in_the_observed_process_in_one_line(tmp_path):
    """A process whose capture.json another mlacheck wrote records why it could not watch: the run cannot pass."""
    from mlacheck.program.agent import Agent
    from mlacheck.rulefiles import load_rule_file

    config = load_rule_file(ROOT / "tests" / "fixtures" / "synthetic.toml")
    rules = {"families": [config.model_dump(mode="json")], "format_version": 99}
    agent = Agent(str(tmp_path), rules)
    from tests.fixtures import synthetic_kernels

    agent._imported(synthetic_kernels)
    agent.sink.close()
    written = [json.loads(line) for line in next(tmp_path.glob("trace-*.jsonl")).read_text().splitlines()]
    [error] = [event for event in written if event["type"] == "internal_error"]
    assert "a capture.json of format 99, newer than" in error["message"] and "\n" not in error["message"]
    assert not [event for event in written if event["type"] == "family"]


def test_the_agent_starts_without_dataclasses_typing_or_importlib_metadata(tmp_path):
    """What the agent adds to a process of the run that imports no watched library (its main script, a resource
    tracker, a tokenizer worker): its own modules, json, zlib and signal, nothing that costs milliseconds."""
    run_dir = _run_folder(tmp_path)
    loaded = "import json, sys; print(json.dumps(sorted(sys.modules)))"
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)}
    plain = json.loads(subprocess.run([sys.executable, "-c", loaded], env=env, capture_output=True).stdout)
    observed = subprocess.run(
        [sys.executable, "-c", loaded], env={**env, "MLACHECK_RUN_DIR": str(run_dir)}, capture_output=True
    )
    added = set(json.loads(observed.stdout)) - set(plain)
    assert "mlacheck.program.agent" in added  # it was observed
    assert not added & {"dataclasses", "typing", "inspect", "importlib.metadata", "email", "hashlib"}, sorted(added)


def test_the_agent_stops_without_loading_inspect_where_no_compile_net_names_copies(tmp_path):
    """The agent's stop (at exit, at an exec) looks for copies of a netted builder only where a compile net names
    copies (`capture.net_copies`, which loads inspect: about 7 ms in a process that did not load it, at the end of
    every spawned worker of an engine, issue 29); where none does, it loads nothing for them."""
    run_dir = _run_folder(tmp_path)
    stopped = (
        "import json, sys; from mlacheck.program.agent import current; agent = current(); agent.stop(); "
        "import os; print(json.dumps([sorted(sys.modules), agent._finder in sys.meta_path, os.getpid()]))"
    )
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "MLACHECK_RUN_DIR": str(run_dir)}
    done = subprocess.run([sys.executable, "-c", stopped], env=env, capture_output=True, text=True, check=True)
    loaded, observing, pid = json.loads(done.stdout)
    assert "mlacheck.program.agent" in loaded and not observing  # it was observed, and it stopped
    assert not {"inspect", "mlacheck.capture.net_copies"} & set(loaded), sorted(loaded)
    trace = (run_dir / f"trace-{pid}.jsonl").read_text().splitlines()
    assert json.loads(trace[-1])["type"] == "exit"  # its stop wrote its end


def _run_folder(tmp_path) -> Path:
    """The run folder of `python -c pass` observed with the synthetic family's rules (a later process joins it)."""
    run_dir = tmp_path / "run"
    subprocess.run(
        [sys.executable, "-m", "mlacheck", "run", "-q", "--rules", str(ROOT / "tests" / "fixtures" / "synthetic.toml")]
        + ["--run-dir", str(run_dir), "--allow-incomplete", "--", sys.executable, "-c", "pass"],
        cwd=ROOT,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)},
        capture_output=True,
        check=True,
    )
    return run_dir


def _same(plain_record: object, model: object) -> None:
    """Every field the plain record has holds what the validated model's field holds (records within, field by field);
    `version_checked` is capture.json's, not the model's."""
    for name in type(plain_record).__annotations__:
        if name == "version_checked":
            continue
        got, want = getattr(plain_record, name), getattr(model, name)
        if hasattr(type(got), "__annotations__") and not isinstance(got, (str, tuple, list, dict)):
            _same(got, want)
        elif isinstance(got, tuple) and got and hasattr(type(got[0]), "__annotations__"):
            assert len(got) == len(want), name
            for item, model_item in zip(got, want):
                _same(item, model_item)
        else:
            assert json.dumps(got, default=list) == json.dumps(want, default=list), (type(model).__name__, name)


def test_the_plain_rules_of_capture_json_hold_what_the_validated_rules_hold():
    """Every bundled rule, dumped to capture.json and read back without validation (as an observed process reads it):
    each field capture reads is the validated rule's; a record refuses a field it does not have, or one left out."""
    import pytest

    from mlacheck.rulefiles import load_rules, plain

    rules = load_rules()
    config = rules.capture_config()
    for data, model in zip(config["families"], rules.families, strict=True):
        _same(plain.rule_file(data), model)
        assert plain.rule_file(data).family.version_checked == data["family"].get("version_checked", {})
    for data, model in zip(config["phases"], rules.phases, strict=True):
        _same(plain.phase_rule(data), model)
    for data, model in zip(config["compile_nets"], rules.compile_nets, strict=True):
        _same(plain.compile_net(data), model)
    for watcher in config["watchers"]:
        _same(plain.triton(watcher["rule"]), rules.tritons[watcher["module"]])
    assert config["families"] and config["phases"] and config["compile_nets"] and config["watchers"]
    with pytest.raises(TypeError, match="unknown fields \\['speed'\\]"):
        plain.PhaseRule(function="m:f", phase="warmup", speed=1)
    with pytest.raises(TypeError, match="missing fields \\['phase'\\]"):
        plain.PhaseRule(function="m:f")
    assert plain.PhaseRule(function="m:f", phase="warmup").engine == ""  # a default


def test_a_stopped_agent_lets_its_captures_go(tmp_path):
    """At exit the agent stays referenced to the interpreter's end (its fork and exec hooks); its captures, which hold
    the library's modules and kernels, are let go when it stops, so that the teardown frees them at its first
    collection (a Triton worker's end cost 6.6 ms more than plain; 2.3 ms once they are let go)."""
    import gc
    import weakref

    from mlacheck.program.agent import Agent
    from mlacheck.rulefiles import load_rules

    agent = Agent(str(tmp_path), load_rules(ROOT / "tests" / "fixtures" / "synthetic.toml").capture_config())
    from tests.fixtures import synthetic_kernels

    sys.meta_path.insert(0, agent._finder)  # as start() does (without its process-wide hooks)
    agent._imported(synthetic_kernels)
    [capture] = agent.captures[synthetic_kernels.__name__]
    assert capture.installed
    held = weakref.ref(capture)
    del capture
    agent.stop()
    gc.collect()
    assert held() is None and agent._finder not in sys.meta_path
    written = [json.loads(line) for line in next(tmp_path.glob("trace-*.jsonl")).read_text().splitlines()]
    assert written[-1]["type"] == "exit"
