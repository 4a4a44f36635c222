"""Which command is a compiler process (compiler_processes._entry, on the bundled [[compiler_process]] entries): a
compiler under a target's or a version's name, a linker, a launcher and a shell's command line are compiles (red-team
15 #1); a query and a preprocess-only command are not (red-team 15 #2)."""

import pytest

from mlacheck.capture.compiler_processes import _entry
from mlacheck.program.shells import shell_commands
from mlacheck.rulefiles import BUNDLED, plain
from mlacheck.rulefiles.loading import load_rule_file

BUNDLED_ENTRIES = load_rule_file(BUNDLED / "jit_compile_nets.toml").compiler_process
ENTRIES = [plain.compiler_process(entry.model_dump(mode="json")) for entry in BUNDLED_ENTRIES]


def found(*argv):
    """(the entry's label, the program named) of a command, else None."""
    entry = _entry(f"/usr/bin/{argv[0]}", list(argv), ENTRIES, shell_commands)
    return entry and (entry[0].label, entry[1])


def label(*argv):
    return (found(*argv) or (None,))[0]


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["g++", "-c", "x.cpp"], "C/C++ compiler"),
        (["x86_64-linux-gnu-g++", "-c", "x.cpp"], "C/C++ compiler"),
        (["g++-12", "-c", "x.cpp"], "C/C++ compiler"),
        (["gcc-13", "-c", "x.c"], "C/C++ compiler"),
        (["clang-17", "-c", "x.c"], "C/C++ compiler"),
        (["x86_64-conda-linux-gnu-gcc", "-c", "x.c"], "C/C++ compiler"),
        (["cc1plus", "x.cpp"], "C/C++ compiler"),
        (["ld", "-shared", "x.o", "-o", "x.so"], "linker"),
        (["ld.gold", "-shared", "x.o"], "linker"),
        (["x86_64-linux-gnu-ld", "-shared", "x.o"], "linker"),
        (["mold", "-shared", "x.o"], "linker"),
        (["ccache", "g++", "-c", "x.cpp"], "C/C++ compiler"),
        (["sccache", "nvcc", "-c", "x.cu"], "GPU compiler"),
        (["distcc", "./mycc", "-c", "x.c"], "compiler launcher"),
        (["sh", "-c", "g++ -c x.cpp -o x.o"], "C/C++ compiler"),
        (["sh", "-c", "cd build && CXX=1 x86_64-linux-gnu-g++ -c x.cpp > log"], "C/C++ compiler"),
        (["bash", "-c", "sh -c 'ccache gcc -c x.c'"], "C/C++ compiler"),
        (["sh", "-c", "exec nice -n 5 g++-12 -c x.cpp"], "C/C++ compiler"),
        (["g++", "-M", "-c", "x.cpp"], "C/C++ compiler"),
        (["g++", "-MMD", "-M", "x.cpp"], "C/C++ compiler"),
    ],
)
def test_a_compile_under_any_name_is_a_compiler_process(argv, expected):
    assert label(*argv) == expected


@pytest.mark.parametrize(
    "argv",
    [
        ["g++", "--version"],
        ["gcc", "-print-file-name=libc.so"],
        ["g++", "-dumpfullversion", "-dumpversion"],
        ["cc", "-dM", "-E", "-x", "c", "/dev/null"],
        ["g++", "-M", "x.cpp"],
        ["g++-12", "-MM", "x.cpp"],
        ["ld", "--version"],
        ["ccache", "-s"],
        ["ccache", "g++", "--version"],
        ["sh", "-c", "echo g++; gcc --version"],
        ["sh", "-c", "ls -l"],
        ["gcc-ar", "rcs", "x.a", "x.o"],
        ["clang-format", "-i", "x.cpp"],
        ["ldd", "x.so"],
        ["ld.so", "--list", "x"],
    ],
)
def test_a_query_or_a_preprocess_is_no_compile(argv):
    assert label(*argv) is None


@pytest.mark.parametrize(
    ("argv", "program"),
    [
        (["g++", "-c", "x.cpp"], "g++"),
        (["sh", "-c", "g++ -c x.cpp -o x.o"], "g++"),
        (["sh", "-c", "cd build && CXX=1 x86_64-linux-gnu-g++ -c x.cpp > log"], "x86_64-linux-gnu-g++"),
        (["bash", "-c", "sh -c 'ccache gcc -c x.c'"], "gcc"),
        (["sh", "-c", "exec nice -n 5 g++-12 -c x.cpp"], "g++-12"),
        (["ccache", "g++", "-c", "x.cpp"], "g++"),
        (["distcc", "./mycc", "-c", "x.c"], "distcc"),
    ],
)
def test_a_compile_is_named_by_the_compiler_it_runs_not_its_shell_or_launcher(argv, program):
    """A shell's line or a launcher names the compiler it runs (an os.system g++ read unwatched:sh before)."""
    assert found(*argv)[1] == program
