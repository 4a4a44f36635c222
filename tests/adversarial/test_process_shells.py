"""A short Python with nothing of mlacheck in it (-S) run on the serving path through a wrapper's options or a shell's
syntax (program/shells.py): it ends between two polls of the process tree, so only the command that ran it can be
seen. The command is read as the wrapper or the shell reads it: the run is INCOMPLETE, never a pass. (Read by the
command's first word past options, each passed whenever the polls missed the child: about half the runs of each.)"""

import sys

import pytest

from tests.adversarial.conftest import WARM, assert_not_pass, observe, program

PYTHON = "sys.executable, '-S', '-c', 'pass'"
COMMANDS = {
    "env -u HOME python -S": f"['env', '-u', 'HOME', {PYTHON}]",
    "timeout -s KILL 10 python -S": f"['timeout', '-s', 'KILL', '10', {PYTHON}]",
    "taskset 0x1 python -S": f"['taskset', '0x1', {PYTHON}]",
    "bash -c 'exec -a worker python -S'": "['bash', '-c', f'exec -a worker {sys.executable} -S -c pass']",
    "sh -c '{ python -S; }'": "['sh', '-c', f'{{ {sys.executable} -S -c pass; }}']",
    "sh -c 'if true; then python -S; fi'": "['sh', '-c', f'if true; then {sys.executable} -S -c pass; fi']",
    "sh -c 'P=python; $P -S'": "['sh', '-c', f'P={sys.executable}; $P -S -c pass']",
    "sh -c 'eval python -S'": "['sh', '-c', f'eval {sys.executable} -S -c pass']",
    "sh -c '\"$@\"' sh python -S": f"['sh', '-c', '\"$@\"', 'sh', {PYTHON}]",
    "bash -c 'pytho[n] -S'": "['bash', '-c', f'{sys.executable[:-1]}[{sys.executable[-1]}] -S -c pass']",
}


@pytest.mark.parametrize("how", list(COMMANDS))
def test_a_python_run_after_serving_start_through_a_wrapper_or_a_shell_is_named(tmp_path, how):
    body = WARM + (
        "import subprocess, sys, mlacheck\nmlacheck.serving_started()\nk.dispatch(1)\n"
        f"subprocess.run({COMMANDS[how]}, check=True)\n"
    )
    result = observe(tmp_path, sys.executable, program(tmp_path, body))
    assert_not_pass(result, "incomplete")
    named = ("ran a command that names a Python interpreter", "wrote no trace")  # its command, or a poll saw it
    assert any(any(words in line for words in named) for line in result.report["incomplete"]), result.report
