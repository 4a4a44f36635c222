"""The command a wrapper runs, read by the table of its options (program/wrappers.py)."""

import pytest

from mlacheck.program.wrappers import WRAPPERS, unwrap


@pytest.mark.parametrize(
    "argv, command",
    [
        (["env", "-u", "HOME", "A=1", "python3", "-S"], ["python3", "-S"]),
        (["env", "--unset=HOME", "--chdir", "/", "python3"], ["python3"]),
        (["timeout", "-s", "KILL", "-k5", "10", "python3"], ["python3"]),
        (["timeout", "--signal", "KILL", "10", "--", "python3"], ["python3"]),
        (["taskset", "-c", "0-3", "python3"], ["python3"]),
        (["exec", "-a", "worker", "python3"], ["python3"]),
        (["numactl", "--cpunodebind=0", "-m", "0", "python3"], ["python3"]),
        (["xargs", "-0", "-n1", "-I", "{}", "python3", "{}"], ["python3", "{}"]),
        (["setarch", "x86_64", "-R", "python3"], ["python3"]),
        (["su", "bob", "-c", "ls"], ["bob"]),
    ],
)
def test_a_wrappers_options_and_operands_are_read_past(argv, command):
    assert unwrap(WRAPPERS[argv[0]], argv[1:]).command == command


def test_a_shell_command_line_an_option_gives_is_read():
    assert unwrap(WRAPPERS["su"], ["-", "bob", "-c", "python3 -S"]).scripts == ["python3 -S"]
    assert unwrap(WRAPPERS["flock"], ["-w", "5", "/tmp/lock", "-c", "make"]).scripts == ["make"]


def test_an_option_not_in_the_table_is_told_with_every_word_from_it():
    run = unwrap(WRAPPERS["nice"], ["-5", "python3"])
    assert not run.known and run.command == ["-5", "python3"]


def test_an_option_with_which_it_runs_nothing_gives_no_command():
    assert unwrap(WRAPPERS["command"], ["-v", "python3"]).command == []
    assert unwrap(WRAPPERS["taskset"], ["-p", "0x1", "123"]).command == []
