"""A Python process run through a non-Python command (program/shells.py): named where no Python process of the
command was traced or seen, since one that ends between two polls of the process tree is not seen."""

import pytest

from mlacheck.program.shells import kept_spawn, names_python, unseen_pythons

SHELL = ["sh", "-c", 'python -S -c "import sys"']


@pytest.mark.parametrize(
    "argv",
    [
        SHELL,
        ["bash", "-lc", "cd x && python3.11 run.py"],
        ["/usr/bin/env", "python3", "x.py"],
        ["timeout", "5", "python3", "x.py"],
        ["sh", "-c", "export A=1; FOO=bar exec nohup python3 -m server"],
        ["bash", "-c", "make build | tee log && (python x.py)"],
        ["env", "-i", "PATH=/usr/bin", "/opt/venv/bin/python3", "x.py"],
    ],
)
def test_a_command_that_names_a_python_interpreter(argv):
    assert names_python(argv)


@pytest.mark.parametrize(
    "argv",
    [
        ["sh", "-c", "ls -l"],
        ["make", "test"],
        ["sh", "-c", "echo 'unbalanced"],
        ["python"],
        # a Python extension's build: its include folder is named python3.11, and no Python runs (every torch
        # cpp_extension build, FlashInfer's and SGLang's JIT modules: a false INCOMPLETE each)
        ["c++", "-MMD", "-isystem", "/usr/include/python3.11", "-c", "a.cpp", "-o", "a.o"],
        ["/bin/sh", "-c", "c++ -isystem /usr/include/python3.11 -c a.cpp -o a.o"],
        ["sh", "-c", "echo python3 is here; ls /usr/lib/python3.11"],
        ["ninja", "-v", "-C", "/tmp/build/python3"],
    ],
)
def test_a_command_that_names_none(argv):
    assert not names_python(argv)


def pytest_process(*spawned: dict) -> dict:
    return {"pid": 10, "ppid": 1, "host": "h", "spawned": list(spawned)}


def spawn(child: int, argv: list[str], python: bool = False) -> dict:
    return {"child": child, "path": argv[0], "argv": argv, "python": python, "rank": None}


def test_a_shell_whose_python_nothing_saw_is_named():
    [(pid, line)] = unseen_pythons([pytest_process(spawn(11, SHELL))], [], "h")
    assert pid == 11 and line.startswith('pid 11 (sh -c python -S -c "import sys"), started by pid 10 on h, ')
    assert "ran a command that names a Python interpreter, and no Python process of it was traced or seen" in line


@pytest.mark.parametrize(
    "traced, records",
    [
        ([{"pid": 12, "ppid": 11, "host": "h"}], []),  # its child was traced
        ([{"pid": 11, "ppid": 10, "host": "h"}], []),  # it exec'd into a traced Python
        ([], [{"pid": 12, "ppid": 11, "python": True}]),  # the tree saw its child (named on its own where untraced)
    ],
)
def test_a_shell_whose_python_was_traced_or_seen_is_not(traced, records):
    assert list(unseen_pythons([pytest_process(spawn(11, SHELL)), *traced], records, "h")) == []


def test_a_shell_the_tree_saw_is_named_where_no_observed_process_started_it():
    records = [{"pid": 20, "ppid": 10, "python": False, "argv": SHELL}]
    [(pid, line)] = unseen_pythons([], records, "h")
    assert pid == 20 and ", seen running by mlacheck on h, ran a command that names a Python interpreter" in line


def test_only_spawns_of_python_or_of_commands_that_name_it_are_kept():
    assert kept_spawn(spawn(11, SHELL)) and kept_spawn(spawn(12, ["/usr/bin/python3", "-c", "pass"], python=True))
    assert not kept_spawn(spawn(13, ["sh", "-c", "ls"]))
