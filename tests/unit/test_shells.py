"""A Python process run through a non-Python command (program/shells.py): named where no Python process of the
command was traced or seen, since one that ends between two polls of the process tree is not seen."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

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


S = "python3 -S -c pass"


@pytest.mark.parametrize(
    "argv",
    [
        # red-team 14: a wrapper's option that takes a value, read before as the command
        ["env", "-u", "HOME", "python3", "-S", "-c", "pass"],
        ["timeout", "-s", "KILL", "10", "python3", "-S", "-c", "pass"],
        ["taskset", "0x1", "python3", "-S", "-c", "pass"],
        ["bash", "-c", "exec -a worker " + S],
        # a shell's syntax: keywords and groups before a command, eval, a command made by an expansion
        ["sh", "-c", "{ " + S + "; }"],
        ["sh", "-c", "if true; then " + S + "; fi"],
        ["sh", "-c", "while true; do " + S + "; done"],
        ["sh", "-c", "case x in x) " + S + ";; esac"],
        ["sh", "-c", "! " + S],
        ["sh", "-c", "P=python3; $P -S -c pass"],
        ["sh", "-c", "eval " + S],
        ["sh", "-c", 'eval "$CMD"  # CMD=python3'],
        ["sh", "-c", "echo -c pass | xargs python3 -S"],
        ["sh", "-c", 'echo "$(python3 -S -c pass)"'],
        ["sh", "-c", "echo `" + S + "`"],
        ["sh", "-c", "`echo python3` -S"],
        [
            "sh",
            "-c",
            "echo `exec python3 -S x.py`",
        ],  # (a backquote's words: one command line, was read a word at a time)
        ["sh", "-c", "echo `nice " + S + "`"],
        ["sh", "-c", "> log " + S],
        ["sh", "-c", "diff <(" + S + ") x"],
        ["sh", "-c", "f() { " + S + "; }; f"],
        ["sh", "-e", "-o", "pipefail", "-c", S],
        ["timeout", "10", "sh", "-c", S],
        ["busybox", "sh", "-c", S],
        ["env", "-S", S],
        # wrappers and launchers that were not in the list
        ["numactl", "--cpunodebind=0", "--membind", "0", "python3"],
        ["numactl", "-N", "0", "python3"],
        ["nice", "-n", "5", "python3"],
        ["nice", "-5", "python3"],  # an option not in the table: any interpreter after it
        ["ionice", "-c", "3", "python3"],
        ["chrt", "-f", "10", "python3"],
        ["prlimit", "--nofile=1024", "-n1024", "python3"],
        ["stdbuf", "-oL", "-e", "0", "python3"],
        ["sudo", "-u", "bob", "-E", "A=1", "python3"],
        ["su", "-c", S, "bob"],
        ["su", "bob", "-c", S],
        ["runuser", "-u", "bob", "--", "python3"],
        ["flock", "/tmp/lock", "python3"],
        ["flock", "-w", "5", "/tmp/lock", "-c", S],
        ["setarch", "x86_64", "-R", "python3"],
        ["xargs", "-I{}", "-P", "4", "python3", "{}"],
        ["perf", "record", "-g", "python3", "x.py"],  # a launcher in no table: an interpreter among its arguments
        ["find", ".", "-exec", "./python", "{}", ";"],
        # a shell whose commands cannot be read: from stdin, or from a script file that is gone
        ["sh"],
        ["bash", "-s", "x"],
        ["sh", "/nonexistent/run.sh"],
    ],
)
def test_a_command_whose_python_hides_behind_options_syntax_or_another_launcher_is_named(argv):
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
        # a command that only looks an interpreter up runs none
        ["sh", "-c", "command -v python3"],
        ["sh", "-c", "command -V python3 || exit 1"],
        ["sh", "-c", "which python"],
        ["sh", "-c", "type python3; hash python3"],
        # a compiler's include folder stays a folder behind a wrapper, an expansion or a redirection
        ["nice", "c++", "-isystem", "/usr/include/python3.11", "-c", "a.cpp"],
        ["sh", "-c", "$CXX -isystem /usr/include/python3.11 -I/usr/include/python3.11 -c a.cpp 2>&1"],
        ["taskset", "-p", "0x1", "123"],
        ["bash", "--version"],
        ["su", "bob", "-c", "ls /usr/lib/python3.11"],
    ],
)
def test_a_command_that_names_none(argv):
    assert not names_python(argv)


@pytest.mark.parametrize(
    "argv",
    [
        # red-team 15: a shell's positional parameters, from its argv after the -c line
        ["sh", "-c", '"$0" -S -c pass', "python3"],
        ["sh", "-c", '"$@"', "sh", "python3", "-S", "-c", "pass"],
        ["sh", "-c", "exec ${1} -S -c pass", "sh", "/usr/bin/python3"],
        # a command word the shell makes: a glob, or an expansion joined with text, that may match an interpreter
        ["bash", "-c", "/usr/bin/pytho[n]3 -S -c pass"],
        ["sh", "-c", "/usr/bin/python3.? -S"],
        ["sh", "-c", "p=pyth; ${p}on3 -S -c pass"],
        ["bash", "-c", "pyth$'on3' -S -c pass"],
        ["bash", "-c", "$'\\x70ython3' -S -c pass"],
        ["sh", "-c", "$a$b -S -c pass"],
        ["sh", "-c", "$WRAP python3 -S"],
        # an alias's value is a command line
        ["bash", "-O", "expand_aliases", "-c", "alias p=python3\np -S -c pass"],
        ["bash", "-c", "alias p='nice python3 -S'"],
        # an interpreter's name as a token of an argument of a command in no table
        ["perl", "-e", 'system("python3 -S -c pass")'],
        ["awk", 'BEGIN{system("python3 -S -c pass")}'],
        ["watch", "-n1", S],
        ["script", "-qc", S, "/dev/null"],
        ["ssh", "host", "cd x; /opt/venv/bin/python3 -S -c pass"],
        # a script from a file that cannot be read at report time
        ["sh", "/dev/stdin"],
        ["bash", "/proc/self/fd/0"],
    ],
)
def test_a_python_started_by_positional_parameters_a_glob_an_alias_or_a_script_text_is_named(argv):
    assert names_python(argv)


@pytest.mark.parametrize(
    "argv",
    [
        ["sh", "-c", '"$@"', "sh", "ls", "-l"],
        ["sh", "-c", "$CC a.c"],
        ["sh", "-c", "$CXX -I/usr/include/python3.11 x.cpp"],
        ["sh", "-c", "${CUDA_HOME}/bin/nvcc -I/usr/include/python3.11 x.cu"],
        ["sh", "-c", "/usr/bin/g?? a.c; ls /usr/bin/py*"],
        ["sh", "-c", "[ -f x ] && echo y"],
        ["bash", "-c", "alias ll='ls -l'"],
        ["perl", "-e", 'print "/usr/lib/python3/dist-packages"'],
        ["awk", "-v", "I=-I/usr/include/python3.11", "BEGIN{print I}"],
        ["pip", "install", "python3-dev", "pythonic"],
    ],
)
def test_a_made_word_or_a_script_text_that_cannot_name_python_names_none(argv):
    assert not names_python(argv)


def test_a_shell_script_file_is_read(tmp_path):
    runs, looks = tmp_path / "runs.sh", tmp_path / "looks.sh"
    runs.write_text('#!/bin/sh\nset -e\nif [ -n "$X" ]; then\n  exec python3 -S worker.py\nfi\n')
    looks.write_text("#!/bin/sh\n# python3 in a comment\ncommand -v python3 && echo found\n")
    assert names_python(["bash", str(runs)]) and names_python(["sh", "-c", f". {runs}"])
    assert not names_python(["sh", "-e", str(looks)])


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


def test_a_command_the_tree_saw_only_as_its_parents_fork_is_named():
    fork = {"exe": "/usr/bin/python3", "argv": ["python3", "app.py"], "python": True, "forked": True}
    records = [{"pid": 11, "ppid": 10, "python": True, "forked": True, "images": [fork]}]
    [(pid, _)] = unseen_pythons([pytest_process(spawn(11, ["timeout", "10", "python3", "-S"]))], records, "h")
    assert pid == 11


def test_a_shell_the_tree_saw_is_named_where_no_observed_process_started_it():
    records = [{"pid": 20, "ppid": 10, "python": False, "argv": SHELL}]
    [(pid, line)] = unseen_pythons([], records, "h")
    assert pid == 20 and ", seen running by mlacheck on h, ran a command that names a Python interpreter" in line


def test_only_spawns_of_python_or_of_commands_that_name_it_are_kept():
    assert kept_spawn(spawn(11, SHELL)) and kept_spawn(spawn(12, ["/usr/bin/python3", "-c", "pass"], python=True))
    assert not kept_spawn(spawn(13, ["sh", "-c", "ls"]))


@pytest.mark.parametrize(
    "traced, named",
    [
        ([{"pid": 11, "ppid": 10, "host": "h", "start_ticks": 600}], True),  # a later process of its pid
        ([{"pid": 11, "ppid": 10, "host": "h", "start_ticks": 500}], False),  # its own exec into a traced Python
        ([{"pid": 12, "ppid": 11, "host": "h", "start_ticks": 550}], False),  # its child
        (  # the child of a later process of its pid
            [
                {"pid": 11, "ppid": 10, "host": "h", "start_ticks": 600},
                {"pid": 12, "ppid": 11, "host": "h", "start_ticks": 650},
            ],
            True,
        ),
        ([{"pid": 11, "ppid": 10, "host": "h"}], False),  # a trace that names no start: by its pid
    ],
    ids=["a later process of its pid", "its exec", "its child", "a later process's child", "no start"],
)
def test_a_shell_is_told_from_a_later_process_of_its_pid_by_its_start(traced, named):
    """Red-team 16 #4: a Python process stands for a shell's command only where it is that process or its child, by
    their starts (clock ticks after boot), where they are known."""
    shell = spawn(11, SHELL) | {"start_ticks": 500}
    spawner = pytest_process(shell) | {"child_starts": [[11, 500]]}
    assert bool(list(unseen_pythons([spawner, *traced], [], "h"))) is named


# -- a shell's case arms and arrays: their patterns and elements are no commands, what they run is ----------------
@pytest.mark.parametrize(
    "script",
    [
        'case "$1" in a) ' + S + " ;; esac",
        "case x in *) " + S + " ;; esac",
        "case x in (x|y) " + S + ";; esac",
        "case a in a) case b in b) " + S + ";; esac;; esac",
        "case x in x) " + S + "\nesac",
        "case x in x) echo;; *) exec " + S + ";; esac",
        "case $(" + S + ") in x) ;; esac",
        "case x in x) v=$(" + S + ");; esac",
        "a=($(" + S + "))",
        "a=(`" + S + "`)",
        "a=(x $(" + S + ") y)",
        'a+=( "$(' + S + ')" )',
        "a=(x); " + S,
        "x=`ls | " + S + "`",
        "cat <<EOF\ncase x in\nEOF\n" + S,  # (a here-document's text never opens a case: read as commands)
        "cat <<'EOF'\nv=(\nEOF\n" + S + "\n)",
        "v=`echo a`; " + S,
        'a=(python3 -S); "${a[@]}" -c pass',  # (an array's words run as a command)
        'declare -a cmd=(python3 -S -c pass); exec "${cmd[@]}"',
    ],
)
def test_what_a_case_arm_or_an_array_runs_is_read(script):
    assert names_python(["bash", "-c", script])


@pytest.mark.parametrize(
    "script",
    [
        'case "$1" in a) echo a ;; *) echo other ;; esac',
        "case $x in python3) echo found ;; pytho[n]*|py*) ls ;; esac",
        'case "$1" in --complete) exec ls ;; *) shift ;; esac',
        "case x in\n  x)\n    ls\n    ;;\n  *) ;;\nesac",
        "versions=(${V:-$(echo a)})",
        "IFS=: scripts=(`ls x`)",
        "a=(python3 -S)",  # (an array's words: text, run by nothing here)
        "DATUM=`date +%Y%m%d`; prog=`basename $0`",  # (a backquote's words are one word: here an assignment's)
        "n=`ls | grep -c python3`",
    ],
)
def test_a_case_arms_patterns_and_an_arrays_words_name_none(script, tmp_path):
    assert not names_python(["bash", "-c", script])
    file = tmp_path / "script.sh"
    file.write_text("#!/bin/bash\n" + script + "\n")
    assert not names_python(["bash", str(file), "x"])


def test_pyenvs_own_scripts_run_no_python_but_through_its_exec(tmp_path):
    """pyenv's `python` shim runs `pyenv exec python`, which asks `pyenv-which python` (a bash script that sources its
    hooks: `source "$script"`, which cannot be read) for the interpreter and execs it: the shim's own process becomes
    Python. A script of that text elsewhere is still named (what it sources is unknown)."""
    text = '#!/usr/bin/env bash\nPYENV_COMMAND="$1"\nfor script in "${scripts[@]}"; do\n  source "$script"\ndone\n'
    libexec = tmp_path / ".pyenv" / "libexec"
    libexec.mkdir(parents=True)
    for name in ("pyenv-which", "pyenv-version-name", "pyenv-hooks", "pyenv-exec", "pyenv"):
        (libexec / name).write_text(text)
    assert not names_python(["bash", str(libexec / "pyenv-which"), "python"])
    assert not names_python(["bash", str(libexec / "pyenv-version-name")])
    assert not names_python(["bash", str(libexec / "pyenv-hooks"), "exec"])
    assert names_python(["bash", str(libexec / "pyenv-exec"), "python"])  # (it execs the interpreter: its own)
    assert names_python(["bash", str(libexec / "pyenv"), "exec", "python"])
    (tmp_path / "run.sh").write_text(text)
    assert names_python(["bash", str(tmp_path / "run.sh"), "python"])


# -- a property: no case, array or group around a command hides what it runs ---------------------------------------
RUNS = st.sampled_from(
    [
        S,
        "exec python3 -S x.py",
        "/opt/venv/bin/python3 -I -c pass",
        "env -i python3",
        "timeout 5 python3.11 -S",
        "nice python3",
    ]  # fmt: skip
)
INERT_COMMANDS = st.sampled_from(
    ["ls -l", "echo python3", "which python", "true", "v=(python3 -S)", "shift", "d=`date`"]
)
HERE_DOCUMENTS = st.sampled_from(
    ["cat <<EOF\ncase x in\nEOF", "cat <<'EOF'\nv=(\nEOF"]
)  # (their text: no case, no array)
PATTERNS = st.sampled_from(["x", "*", "a|b", "(x)", "python3", "--complete", "py*"])


@st.composite
def around(draw, inner: str, before=INERT_COMMANDS) -> str:
    """`inner` somewhere a shell runs it: an arm of a case (among other arms), a command substitution in an array or
    a case's subject, a group, a subshell, after other commands (`before`: each on a line of its own)."""
    before = draw(st.lists(before, max_size=2))
    arms = [f"{draw(PATTERNS)}) {command};;" for command in draw(st.lists(INERT_COMMANDS, max_size=2))]
    at = draw(st.integers(0, len(arms)))
    wrapped = draw(
        st.sampled_from(
            [
                f"case $1 in {' '.join([*arms[:at], f'{draw(PATTERNS)}) {inner};;', *arms[at:]])} esac",
                f"case $1 in\n  {draw(PATTERNS)})\n    {inner}\n    ;;\nesac",
                f"v=(a $({inner}) b)",
                f"v=(`{inner}`)",
                f"case $({inner}) in x) ls;; esac",
                f"{{ {inner}; }}",
                f"( {inner} )",
            ]
        )
    )
    return "\n".join([*before, wrapped])


@given(st.data())
@settings(max_examples=300, deadline=None)
def test_a_command_that_runs_python_is_named_wherever_a_shell_runs_it(data):
    script = data.draw(around(data.draw(RUNS), st.one_of(INERT_COMMANDS, HERE_DOCUMENTS)))
    assert names_python(["bash", "-c", script]), script


@given(st.data())
@settings(max_examples=300, deadline=None)
def test_the_same_places_around_commands_that_run_nothing_name_none(data):
    script = data.draw(around(data.draw(st.sampled_from(["ls -l", "echo done", "command -v python3"]))))
    assert not names_python(["bash", "-c", script]), script
