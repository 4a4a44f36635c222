"""Saved run folders read back (program/saved.py), from folders written by hand: every line that keeps a run from
passing (an unobserved process or image, a lost or unaccounted event, a cut-short trace, a family no rule declares, a
run that never finished, a folder replaced or vanished) reaches the report, word for word."""

import json
import os
from pathlib import Path

import pytest

from mlacheck import events
from mlacheck.errors import MlacheckError
from mlacheck.program.run_folder import RunFolder
from mlacheck.program.saved import load_runs, program_report
from mlacheck.program.supervisor import Supervised
from mlacheck.rulefiles import load_rules

KEY = {"q_dtype": "torch.float8_e4m3fn"}


def write_trace(path: Path, *written: dict, tail: bytes = b"") -> Path:
    path.write_bytes(b"".join((json.dumps(event) + "\n").encode() for event in written) + tail)
    return path


def run_of(pid: int, **facts) -> dict:
    return events.run_event(pid, 1.0, host="h", **facts)


def folder(tmp_path: Path, name: str = "run") -> RunFolder:
    return RunFolder.create(tmp_path / name)


def damaged_run(tmp_path: Path) -> RunFolder:
    """A run folder with one of each kind of damage, and no meta.json (the run never finished)."""
    run = folder(tmp_path)
    p = run.path
    compiled = events.compile_event("ghost", 0, KEY, None, "warmup", 1.0, "compile", "a.py:1", [])
    write_trace(
        p / "trace-100.jsonl",
        run_of(100, argv=["python", "serve.py"]),
        events.family_event("ghost", "ghost", "1", [], ["q_dtype"], "dict", None, 0),
        compiled,
        events.counts_event("ghost", {"0:warmup": 1, "7:serving": 3}, {}, final=True),
        events.context_event({"target_arch": "sm_103a"}),
        events.exec_event("/usr/bin/python3", ["python3", "-c", "pass"], python=True),
    )
    write_trace(
        p / "trace-200.jsonl",
        run_of(200, trace_replaced=True, target_arch="sm_100a"),
        events.lost_event(3, {"ENOSPC": 3}),
    )
    (p / "trace-200.jsonl.lost").write_text("5 event(s) lost (ENOSPC x5)\n")
    write_trace(p / "trace-300.jsonl", run_of(300), events.lost_event(2, {"EIO": 2}), tail=b'{"type":"disp')
    write_trace(p / "trace-301.jsonl", run_of(301), tail=b'{"type":"disp')
    (p / "unobserved-500.txt").write_text("pid 500: the agent could not start\n  (ImportError)\n")
    image = {"exe": "/usr/bin/python3", "argv": ["python3", "worker.py"], "python": True, "forked": False}
    run.write_tree(
        {
            "host": "h",
            "processes": [
                {"pid": 100, "python": True, "forked": False, "images": [image, image], "rank": 0},
                {"pid": 400, "python": True, "forked": False, "images": [image], "rank": 3},
                {"pid": 401, "python": True, "forked": True, "images": [{**image, "forked": True}]},
                {"pid": 402, "python": False, "forked": False, "images": [{**image, "python": False}]},
                {"pid": 500, "python": True, "forked": False, "images": [image], "rank": 5},
            ],
        }
    )
    return run


def test_every_loss_and_unobserved_process_of_a_damaged_run_is_said(tmp_path):
    run = damaged_run(tmp_path)
    p = run.path
    loaded = load_runs([p])
    assert loaded.unobserved == [
        "pid 500: the agent could not start (ImportError)",
        "pid 100 exec'd into /usr/bin/python3 (python3 -c pass), whose image wrote no trace: nothing of mlacheck "
        "started in it (an interpreter without mlacheck installed, a cleared environment, or -S)",
        "pid 400 (python3 worker.py), seen running by mlacheck on h, wrote no trace: nothing of mlacheck started in it "
        "(an interpreter without mlacheck installed, started without the run's PYTHONPATH, or with -S)",
    ]
    assert loaded.unobserved_processes == [
        {"pid": 500, "host": "h", "rank": 5, "run": str(p)},
        {"pid": 100, "host": "h", "rank": 0, "run": str(p)},
        {"pid": 400, "host": "h", "rank": 3, "run": str(p)},
    ]
    assert loaded.lost == [
        f"{p}/trace-200.jsonl: 5 event(s) lost (ENOSPC x5): they were never written to it",
        f"{p}/trace-200.jsonl: deleted while pid 200 ran; what it held before is lost",
        f"{p}/trace-300.jsonl: 2 event(s) were never written to it (EIO x2)",
    ]
    assert [process["pid"] for process in loaded.processes] == [100, 200, 300, 301]
    assert loaded.programs == [{"command": None, "exit_code": None, "signal": None, "unfinished": True}]

    report = program_report([p], rules=load_rules())
    assert report.verdict == "incomplete" and report.mode == "program"
    assert report.target_arch == "sm_103a"  # the process's own context, before a run event's
    for line in [
        f"{p}: the run never finished (no meta.json: mlacheck itself was stopped), so its process tree and the "
        "program's end were not recorded",
        *loaded.unobserved,
        *loaded.lost,
        f"{p}/trace-300.jsonl ends in a cut-short line (a write the file refused)",
        f"{p}/trace-301.jsonl ends in a cut-short line (its process was killed while writing it)",
        "ghost was recorded, but no rule file given declares it: it was not analysed; pass --rules with its rule file",
        "events were lost: pid 100: ghost dispatches of 1 variant(s) counted (vid 7) whose compile and dispatch "
        "records are missing (whether they compiled on the serving path is unknown)",
    ]:
        assert any(line in reason for reason in report.incomplete), (line, report.incomplete)
    assert report.incomplete[0].startswith(f"{p}: the run never finished")


def test_a_run_event_names_the_target_arch_where_no_context_does(tmp_path):
    run = folder(tmp_path)
    write_trace(run.path / "trace-1.jsonl", run_of(1), events.exit_event(None, "exit"))
    write_trace(run.path / "trace-2.jsonl", run_of(2, target_arch="sm_100a"), events.exit_event(None, "exit"))
    report = program_report([run.path], rules=load_rules())
    assert report.target_arch == "sm_100a"
    assert program_report([run.path], rules=load_rules(), context={"target_arch": "sm_103a"}).target_arch == "sm_103a"


def test_an_exec_to_a_program_that_is_not_python_is_not_unobserved(tmp_path):
    run = folder(tmp_path)
    write_trace(run.path / "trace-1.jsonl", run_of(1), events.exec_event("/bin/true", ["true"], python=False))
    write_trace(run.path / "trace-2.jsonl", run_of(2), events.exec_event(failed="ENOENT"))
    assert load_runs([run.path]).unobserved == []


def test_each_image_of_an_exec_is_a_process_and_a_missing_image_of_the_tree_is_said(tmp_path):
    run = folder(tmp_path)
    write_trace(
        run.path / "trace-1.jsonl",
        run_of(1, argv=["python", "a.py"]),
        events.exec_event(sys_python := "/usr/bin/python3", ["python3", "b.py"], python=True),
        run_of(1, argv=["python3", "b.py"]),
    )
    image = {"exe": sys_python, "argv": ["python3", "b.py"], "python": True, "forked": False}
    run.write_tree({"host": "h", "processes": [{"pid": 1, "python": True, "forked": False, "images": [image] * 3}]})
    loaded = load_runs([run.path])
    assert [(process["pid"], process["image"]) for process in loaded.processes] == [(1, 0), (1, 1)]
    assert loaded.processes[0]["exec"]["path"] == sys_python and loaded.processes[1]["exec"] is None
    assert loaded.unobserved == [
        "pid 1 (python3 b.py), seen running by mlacheck on h, ran an image (an exec) that wrote no trace: nothing of "
        "mlacheck started in it (an interpreter without mlacheck installed, started without the run's PYTHONPATH, or "
        "with -S)"
    ]


def test_a_python_child_is_named_by_its_parents_spawn_once_and_one_that_only_says_its_version_not_at_all(tmp_path):
    """A spawned Python child with no trace is named by its parent's spawn event, with the rank it was given; one the
    tree names too is named once (the tree's line); `python --version` or `-h`, by a spawn, an exec or the tree,
    runs no code and is never named; a spawned child that wrote a trace, or that runs no Python, is not named."""
    run = folder(tmp_path)
    spawn = events.spawn_event
    write_trace(
        run.path / "trace-1.jsonl",
        run_of(1, argv=["python", "serve.py"]),
        spawn(2, "/usr/bin/python3", ["python3", "-S", "worker.py"], True, 4),
        spawn(3, "/usr/bin/python3", ["python3", "-S", "seen.py"], True, None),
        spawn(4, "/usr/bin/python3", ["python3", "--version"], True, None),
        spawn(5, "/usr/bin/python3", ["python3", "observed.py"], True, None),
        spawn(6, "/bin/sh", ["sh", "-c", "true"], False, None),
        events.exec_event("/usr/bin/python3", ["python3", "-h"], python=True),
    )
    write_trace(run.path / "trace-5.jsonl", run_of(5, argv=["python3", "observed.py"]))
    image = {"exe": "/usr/bin/python3", "python": True, "forked": False}
    run.write_tree(
        {
            "host": "h",
            "processes": [
                {
                    "pid": 3,
                    "python": True,
                    "forked": False,
                    "images": [{**image, "argv": ["python3", "-S", "seen.py"]}],
                    "rank": 7,
                },
                {"pid": 7, "python": True, "forked": False, "images": [{**image, "argv": ["python3", "-V"]}]},
            ],
        }
    )
    loaded = load_runs([run.path])
    assert loaded.unobserved == [
        "pid 3 (python3 -S seen.py), seen running by mlacheck on h, wrote no trace: nothing of mlacheck started in it "
        "(an interpreter without mlacheck installed, started without the run's PYTHONPATH, or with -S)",
        "pid 2 (python3 -S worker.py), started by pid 1 on h, wrote no trace: nothing of mlacheck started in it (an "
        "interpreter without mlacheck installed, started without the run's PYTHONPATH, or with -S)",
    ]
    assert [(p["pid"], p["rank"]) for p in loaded.unobserved_processes] == [(3, 7), (2, 4)]


def test_a_process_whose_trace_is_there_but_unreadable_wrote_a_trace_that_could_not_be_read(tmp_path):
    """A trace of binary bytes (compressed, overwritten) holds no event: its process, seen by the tree or spawned by a
    traced one, is named as one whose trace could not be read, not as one that wrote none."""
    run = folder(tmp_path)
    write_trace(
        run.path / "trace-1.jsonl",
        run_of(1, argv=["python", "serve.py"]),
        events.spawn_event(8, "/usr/bin/python3", ["python3", "worker.py"], True, None),
    )
    (run.path / "trace-7.jsonl").write_bytes(b"\x1f\x8b\x08\x00\xff\xfe\n\x00\x89PNG\r\n")
    (run.path / "trace-8.jsonl").write_bytes(b"\x1f\x8b\x08\x00\xff\xfe\n")
    image = {"exe": "/usr/bin/python3", "argv": ["python3", "serve.py"], "python": True, "forked": False}
    run.write_tree({"host": "h", "processes": [{"pid": 7, "python": True, "forked": False, "images": [image]}]})
    loaded = load_runs([run.path])
    assert loaded.unobserved == [
        "pid 7 (python3 serve.py), seen running by mlacheck on h, wrote a trace that could not be read "
        "(trace-7.jsonl: no line of it is an mlacheck event)",
        "pid 8 (python3 worker.py), started by pid 1 on h, wrote a trace that could not be read (trace-8.jsonl: no "
        "line of it is an mlacheck event)",
    ]
    assert not [line for line in loaded.unobserved if "wrote no trace" in line]


def test_a_supervised_run_whose_folder_vanished_or_was_replaced_reads_nothing_from_it(tmp_path):
    tree = {"host": "h", "processes": []}
    supervised = Supervised(meta={"command": ["x"], "exit_code": 0, "signal": None}, tree=tree, problems=["p: full"])
    gone = tmp_path / "gone"
    loaded = load_runs([gone], supervised)
    assert loaded.problems == [
        f"{gone}: the run folder vanished while the program ran (deleted or moved away): the traces in it are lost",
        "p: full",
    ]
    run = folder(tmp_path)
    write_trace(run.path / "trace-1.jsonl", run_of(1))
    os.chmod(run.path, 0o777)
    try:
        loaded = load_runs([run.path], supervised)
        report = program_report([run.path], rules=load_rules(), supervised=supervised)
    finally:
        os.chmod(run.path, 0o700)
    assert loaded.problems == [
        f"{run.path}: the run folder was replaced while the program ran ({run.path} can be written by others (mode "
        "777)): nothing in it is read",
        "p: full",
    ]
    assert loaded.processes == [] and loaded.digest.families == set() and loaded.programs == [supervised.meta]
    assert report.verdict == "incomplete" and report.incomplete[:2] == loaded.problems


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda tmp: [tmp / "none"], "no such run folder"),
        (lambda tmp: [tmp], "not a run folder"),
        (lambda tmp: [RunFolder.create(tmp / "r").path] * 2, "given twice"),
    ],
)
def test_a_wrong_run_folder_is_refused_in_one_line(tmp_path, make, message):
    with pytest.raises(MlacheckError, match=message):
        load_runs(make(tmp_path))
